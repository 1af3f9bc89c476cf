//! Print the counted inlined sites of a pattern with their probes and doubts, one line
//! each: `cargo run -p sbs-probes --example inlined_sites -- BINARY PATTERN`. A line reads
//! `UNBOUNDED` when the site's count may be off with no bound, `BOUNDED` when its doubt
//! has one (an unrolled loop, shared code), and what the doubt is.
use sbs_probes::program::Program;
use sbs_probes::resolve::match_patterns;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(bin), Some(pat)) = (args.next(), args.next()) else {
        return Err("usage: inlined_sites BINARY PATTERN".into());
    };
    let mut target = Program::load(std::path::Path::new(&bin), None)?;
    for m in match_patterns(&mut target, &[pat], usize::MAX)? {
        for s in &m.sites {
            let state = match (s.unbounded, &s.uncertain) {
                (true, _) => "UNBOUNDED",
                (false, Some(_)) => "BOUNDED",
                (false, None) => "exact",
            };
            let points: Vec<String> = s
                .points
                .iter()
                .map(|p| format!("{:#x}", p.address))
                .collect();
            println!(
                "{state}\t{}\t{} in {}\t[{}]\t{}",
                s.points.len(),
                s.call_site.as_deref().unwrap_or("(no call line)"),
                s.caller,
                points.join(" "),
                s.uncertain.as_deref().unwrap_or("")
            );
        }
        for (why, n) in &m.not_counted {
            println!("NOT COUNTED\t{n}\t{why}");
        }
    }
    Ok(())
}
