//! `sbs-profile report`: reports rendered from a saved history, without running anything.

mod util;

use util::sbs;

fn save(history: &str, blocks: &str) -> util::Finished {
    sbs([
        "--history",
        history,
        "--save",
        "--name",
        "alloc-fixture",
        "--runs",
        "2",
        "--warmup",
        "0",
        "--alloc",
        "--threshold",
        "5",
        "--",
        fixture!("allocate"),
        blocks,
        "1024",
    ])
}

#[test]
fn report_compares_the_latest_entry_and_draws_trends() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h");
    let history = history.to_str().unwrap();
    save(history, "100").success();
    save(history, "100").success();
    // The same history, nothing regressed: exit 0, every metric has a two-point trend.
    let run = sbs(["report", "--history", history, "-f", "json"]).success();
    let report = run.json();
    assert_eq!(report["from_history"], history);
    let count = util::metric(&report, "alloc.count");
    assert_eq!(count["trend"].as_array().unwrap().len(), 2, "{count:#}");
    assert_eq!(count["comparison"]["verdict"], "no_change");
    // Saved entries are named by their position in the history (and commit, if any).
    let reference = count["comparison"]["reference"].as_str().unwrap();
    assert!(reference.starts_with("#1 "), "{reference}");

    // A third entry with 10% more blocks: the latest regresses, exit 1, and the trend marks it.
    let saved = save(history, "110");
    assert_eq!(
        saved.code(),
        Some(1),
        "the run itself regresses, and is saved anyway"
    );
    let html = dir.path().join("r.html");
    let run = sbs([
        "report",
        "--history",
        history,
        "--html",
        html.to_str().unwrap(),
        "-f",
        "json",
    ]);
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    run.check(
        run.stderr()
            .contains("regression: alloc.count of `alloc-fixture` regressed +"),
        "names the regression",
    );
    let report = run.json();
    let trend = util::metric(&report, "alloc.count")["trend"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(trend.len(), 3);
    assert_eq!(trend[2]["verdict"], "regressed");
    assert_eq!(trend[1]["verdict"], "no_change");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("alloc.count — history"),
        "trend figure present"
    );

    // The latest entry is named by its position, never "this run", in every part of the text.
    let text = sbs(["report", "--history", history]);
    assert_eq!(text.code(), Some(1));
    // Exact counts are compared exactly with the entry before the latest (no ANOVA and
    // no p-value over exact values).
    assert!(
        text.stdout().contains("REGRESSED") && !text.stdout().contains("ANOVA"),
        "{}",
        text.stdout()
    );
    assert!(!text.stdout().contains("this run"), "{}", text.stdout());

    // Markdown for a pull request.
    let md = sbs([
        "report",
        "--history",
        history,
        "-f",
        "markdown",
        "--name",
        "alloc-fixture",
    ]);
    assert!(md.stdout().contains("| `alloc.count` |"), "{}", md.stdout());
    assert!(md.stdout().contains("❌ regressed"));
}

#[test]
fn report_without_history_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    sbs(["report", "--history", dir.path().to_str().unwrap()]).fails_with(2, "no saved history in");
    let history = dir.path().join("h");
    save(history.to_str().unwrap(), "10").success();
    sbs([
        "report",
        "--history",
        history.to_str().unwrap(),
        "--name",
        "other",
    ])
    .fails_with(2, "--name other: no such benchmark");
}

#[test]
fn report_keeps_the_saved_breakdown_of_a_metric() {
    // A shell that runs two programs: alloc.count has a breakdown by process role.
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h");
    let history = history.to_str().unwrap();
    let allocate = fixture!("allocate");
    let script = format!("{allocate} 10 1024; {allocate} 20 1024");
    let run = sbs([
        "--history",
        history,
        "--save",
        "--runs",
        "2",
        "--warmup",
        "0",
        "--alloc",
        "-f",
        "json",
        "--",
        "sh",
        "-c",
        &script,
    ])
    .success();
    let details = |report: &serde_json::Value| -> Vec<(String, Vec<f64>)> {
        util::metric(report, "alloc.count")["details"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["label"].as_str().unwrap().to_string(), util::samples(d)))
            .collect()
    };
    let measured = details(&run.json());
    assert!(
        measured.iter().any(|(label, _)| label == "exec'd programs"),
        "{measured:?}"
    );
    let report = sbs(["report", "--history", history, "-f", "json"]).success();
    assert_eq!(details(&report.json()), measured);
}

#[test]
fn a_threshold_for_a_metric_that_does_not_exist_is_refused() {
    // A typo in a CI job's --threshold used to switch that gate off without a word.
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h");
    let history = history.to_str().unwrap();
    save(history, "100").success();
    save(history, "100").success();
    sbs([
        "report",
        "--history",
        history,
        "--threshold",
        "alloc.cuont=0",
    ])
    .fails_with(2, "did you mean `alloc.count`?");
    sbs(["report", "--history", history, "--threshold", "alloc.*=0"]).success();
}

#[test]
fn color_is_asked_for_or_left_to_the_terminal() {
    let compare = |color: &[&str]| {
        let mut args = vec!["compare", "--runs", "2", "--warmup", "0", "--alloc"];
        args.extend_from_slice(color);
        let a = format!("{} 100 1024", fixture!("allocate"));
        let b = format!("{} 200 1024", fixture!("allocate"));
        let run = sbs(args.iter().copied().chain([a.as_str(), b.as_str()]));
        assert_eq!(run.code(), Some(1), "{}", run.stderr());
        run.stdout()
    };
    // A pipe gets no colour by default; `always` colours the regression red anyway.
    assert!(!compare(&[]).contains('\x1b'));
    assert!(compare(&["--color", "always"]).contains("\x1b[1;31mREGRESSED"));
    assert!(!compare(&["--color", "never"]).contains('\x1b'));
}

#[test]
fn the_headline_comes_first_and_compare_ends_with_the_speed_ratio() {
    let a = format!("{} 100 1024", fixture!("allocate"));
    let b = format!("{} 200 1024", fixture!("allocate"));
    let args = |format: &'static str| {
        [
            "compare", "--runs", "3", "--warmup", "0", "--time", "--alloc", "-f", format,
        ]
    };
    let text = sbs(args("text").iter().copied().chain([a.as_str(), b.as_str()]));
    assert_eq!(text.code(), Some(1), "{}", text.stderr());
    let out = text.stdout();
    let first = out.lines().next().unwrap();
    // alloc.count, alloc.bytes, alloc.frees and heap.peak double; the rest may move.
    assert!(
        first.contains("regressed against `") && first.contains("alloc.count +"),
        "{first}"
    );
    // Wall time decides ("`b` ran 1.2 ± 0.1 times slower than `a` (CPU time: ...)"), or
    // CPU time does where wall time cannot ("`b` against `a`: wall time varies...").
    // The summary comes after the benchmarks, before the footer (whose length varies: a
    // busy machine adds a `machine:` line, a warning a count of them).
    let last_lines: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Summary"))
        .take(4)
        .collect();
    assert!(
        last_lines
            .iter()
            .any(
                |l| (l.contains(&format!("`{b}` ran ")) && l.contains(&format!(" than `{a}`")))
                    || l.contains(&format!("`{b}` against `{a}`: wall time"))
            ),
        "{out}"
    );

    let json = sbs(args("json").iter().copied().chain([a.as_str(), b.as_str()])).json();
    let headline = json["headline"].as_str().unwrap();
    assert!(headline.contains("metrics regressed against"), "{headline}");
    let speed = &json["speed"][0];
    assert_eq!(speed["benchmark"], b.as_str());
    assert_eq!(speed["reference"], a.as_str());
    let (low, ratio, high) = (
        speed["ratio_low"].as_f64().unwrap(),
        speed["ratio"].as_f64().unwrap(),
        speed["ratio_high"].as_f64().unwrap(),
    );
    assert!(low <= ratio && ratio <= high, "{speed}");

    // A plain run with nothing to compare with has no headline.
    let plain = sbs([
        "--runs",
        "2",
        "-f",
        "json",
        "--",
        fixture!("exit_with"),
        "0",
    ])
    .success();
    assert!(plain.json().get("headline").is_none());
}

#[test]
fn time_unit_fixes_the_unit_of_every_time_in_text_and_markdown() {
    let run = |format: &str| {
        sbs([
            "--runs",
            "2",
            "--warmup",
            "0",
            "-u",
            "microsecond",
            "-f",
            format,
            "--",
            fixture!("exit_with"),
            "0",
        ])
        .success()
        .stdout()
    };
    let text = run("text");
    for id in ["time.wall", "time.user", "time.sys"] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(id))
            .unwrap();
        let cells: Vec<&str> = line.split_whitespace().collect();
        // mean, its unit, and the unit column all in microseconds.
        assert_eq!(cells[2], "us", "{line}");
        assert!(line.contains("  us  "), "{line}");
        assert!(!line.contains(" ms") && !line.contains(" s "), "{line}");
    }
    assert!(run("markdown").contains(" us"));
    assert!(!run("json").contains(" us"), "JSON keeps seconds");
}

/// Set the `time.wall` values of each saved entry of `history` (oldest first) to
/// `values[i]` (milliseconds, one per run).
fn set_wall_times(history: &std::path::Path, values: &[&[f64]]) {
    let mut files: Vec<_> = std::fs::read_dir(history.join("history"))
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), values.len(), "{files:?}");
    for (file, ms) in files.iter().zip(values) {
        let mut reader = csv::Reader::from_path(file).unwrap();
        let header = reader.headers().unwrap().clone();
        let at = |name: &str| header.iter().position(|h| h == name).unwrap();
        let (metric, detail, run, value) = (at("metric"), at("detail"), at("run"), at("value"));
        let mut rows = Vec::new();
        for record in reader.records() {
            let mut row: Vec<String> = record.unwrap().iter().map(String::from).collect();
            if row[metric] == "time.wall" && row[detail].is_empty() {
                let i: usize = row[run].parse().unwrap();
                row[value] = (ms[i] / 1000.0).to_string();
            }
            rows.push(row);
        }
        let mut writer = csv::Writer::from_path(file).unwrap();
        writer.write_record(&header).unwrap();
        for row in rows {
            writer.write_record(&row).unwrap();
        }
        writer.flush().unwrap();
    }
}

/// The trend's last point is the latest entry, whose verdict the table gives: the plot
/// marks it the same way (red when the table says regressed), also when a step against
/// the entry before it alone would not have. Here the latest entry is 0.7 ms slower than
/// three identical ones: pooled, they call it a regression; against the one before it
/// alone, five runs each, the interval is too wide. The plot drew it black.
#[test]
fn the_trend_marks_the_latest_entry_as_the_table_judges_it() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h");
    for _ in 0..4 {
        // The times saved here are replaced below; a noisy machine can make the gate
        // fail a run against the ones before (exit 1), and the run is saved all the same.
        // No confirmation runs: every entry keeps the 5 runs the times below replace.
        let run = sbs([
            "--history",
            history.to_str().unwrap(),
            "--save",
            "--name",
            "trend",
            "--runs",
            "5",
            "--warmup",
            "0",
            "--confirm",
            "0",
            "--",
            fixture!("exit_with"),
            "0",
        ]);
        assert!(matches!(run.code(), Some(0 | 1)), "{}", run.stderr());
    }
    let same: &[f64] = &[10.0, 11.0, 10.0, 11.0, 10.0];
    let slower: &[f64] = &[10.7, 11.7, 10.7, 11.7, 10.7];
    set_wall_times(&history, &[same, same, same, slower]);
    let html = dir.path().join("trend.html");
    // The entries were saved on whatever this machine was doing (other tests beside
    // them): their planted times are judged all the same.
    let run = sbs([
        "report",
        "--history",
        history.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
        "-f",
        "json",
        "--judge-busy",
    ]);
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    let report = run.json();
    let wall = util::metric(&report, "time.wall");
    assert_eq!(wall["comparison"]["verdict"], "regressed", "{wall:#}");
    let trend = wall["trend"].as_array().unwrap();
    assert_eq!(trend.len(), 4);
    assert_eq!(trend[3]["verdict"], "regressed", "{wall:#}");
    // The plot: the last of the four points is red, the others are not.
    let page = std::fs::read_to_string(&html).unwrap();
    let figure = page
        .split("<figure class=trend><figcaption>time.wall — history")
        .nth(1)
        .and_then(|rest| rest.split("</figure>").next())
        .expect("the trend of time.wall");
    let red_points = figure
        .matches("r=\"4\" opacity=\"1\" fill=\"#D21E1E\"")
        .count();
    assert_eq!(red_points, 1, "{figure}");
}
