//! How each metric grows over a parameter scan (`-P`/`-L`): least squares of the metric's
//! mean at each point against the classic growth shapes, ScalaMeter's question answered
//! with a fit and its quality.

use sbs_reports::model::{BenchmarkResult, GrowthFit, Report};

/// `f` of a shape `y = a + b·f(x)`.
type Shape = fn(f64) -> f64;

/// The shapes a metric is fitted to, as `(name, f)`; `1`, the constant `y = a`, is the
/// fallback when none of them changes enough over the range.
const SHAPES: [(&str, Shape); 4] = [
    ("log n", f64::ln),
    ("n", |x| x),
    ("n log n", |x| x * x.ln()),
    ("n^2", |x| x * x),
];

/// A shape whose fitted change over the scanned range is below this share of the mean is
/// no growth at all.
const FLAT: f64 = 0.01;

/// Below this R², no shape explains the points: the growth is reported as unclear.
const CLEAR: f64 = 0.5;

/// Fill in the fits of every scan of `report`: one per metric present at every numeric
/// point.
pub fn fit_scans(report: &mut Report) {
    let benchmarks = &report.benchmarks;
    for scan in report.scans.iter_mut() {
        let points: Vec<(f64, &BenchmarkResult)> = scan
            .points
            .iter()
            .filter_map(|p| {
                let b = benchmarks.iter().find(|b| b.name == p.benchmark)?;
                Some((p.x?, b))
            })
            .collect();
        let Some((_, first)) = points.first() else {
            continue;
        };
        scan.fits = first
            .metrics
            .iter()
            .filter_map(|metric| {
                let xy = points
                    .iter()
                    .map(|(x, b)| {
                        let m = b.metrics.iter().find(|m| m.id == metric.id)?;
                        (m.summary.n > 0).then_some((*x, m.summary.mean))
                    })
                    .collect::<Option<Vec<_>>>()?;
                fit(&metric.id, &xy)
            })
            .collect();
    }
}

/// The best shape for the points `(x, mean)` of `metric`; `None` with fewer than 3
/// distinct x (any shape fits two points).
pub fn fit(metric: &str, xy: &[(f64, f64)]) -> Option<GrowthFit> {
    let mut xs: Vec<f64> = xy.iter().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    if xs.len() < 3 {
        return None;
    }
    let n = xy.len() as f64;
    let mean_y = xy.iter().map(|p| p.1).sum::<f64>() / n;
    let ss_tot: f64 = xy.iter().map(|p| (p.1 - mean_y).powi(2)).sum();
    let constant = GrowthFit {
        metric: metric.to_string(),
        shape: "1".to_string(),
        intercept: mean_y,
        slope: 0.0,
        r2: 1.0,
        points: xy.len(),
        clear: true,
    };
    if ss_tot == 0.0 {
        return Some(constant);
    }
    let positive = xy.iter().all(|p| p.0 > 0.0);
    let (lo, hi) = (xs[0], xs[xs.len() - 1]);
    let best = SHAPES
        .iter()
        // log n and n log n need x > 0.
        .filter(|(name, _)| positive || matches!(*name, "n" | "n^2"))
        .filter_map(|(name, f)| {
            let fx: Vec<f64> = xy.iter().map(|p| f(p.0)).collect();
            let mean_f = fx.iter().sum::<f64>() / n;
            let sxx: f64 = fx.iter().map(|v| (v - mean_f).powi(2)).sum();
            if sxx == 0.0 {
                return None;
            }
            let sxy: f64 = fx
                .iter()
                .zip(xy)
                .map(|(v, p)| (v - mean_f) * (p.1 - mean_y))
                .sum();
            let slope = sxy / sxx;
            let intercept = mean_y - slope * mean_f;
            let ss_res: f64 = fx
                .iter()
                .zip(xy)
                .map(|(v, p)| (p.1 - intercept - slope * v).powi(2))
                .sum();
            let change = (slope * (f(hi) - f(lo))).abs();
            Some((ss_res, change, name, slope, intercept))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))?;
    let (ss_res, change, shape, slope, intercept) = best;
    if change <= FLAT * mean_y.abs() {
        return Some(GrowthFit {
            r2: 1.0 - ss_tot.min(ss_res) / ss_tot,
            ..constant
        });
    }
    let r2 = 1.0 - ss_res / ss_tot;
    Some(GrowthFit {
        metric: metric.to_string(),
        shape: shape.to_string(),
        intercept,
        slope,
        r2,
        points: xy.len(),
        clear: r2 >= CLEAR,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        [100.0, 200.0, 400.0, 800.0, 1600.0]
            .iter()
            .map(|&x| (x, f(x)))
            .collect()
    }

    #[test]
    fn exact_counts_are_fitted_to_their_shape() {
        for (f, shape, slope) in [
            (
                Box::new(|x: f64| 2.0 * x + 7.0) as Box<dyn Fn(f64) -> f64>,
                "n",
                2.0,
            ),
            (Box::new(|x: f64| 0.5 * x * x + 3.0 * x), "n^2", 0.5),
            (Box::new(|x: f64| 3.0 * x * x.ln()), "n log n", 3.0),
            (Box::new(|x: f64| 10.0 * x.ln() + 1.0), "log n", 10.0),
        ] {
            let fit = fit("alloc.count", &points(f)).unwrap();
            assert_eq!(fit.shape, shape, "{fit:?}");
            if shape != "n^2" {
                assert!((fit.slope - slope).abs() < 1e-9, "{fit:?}");
                assert!((fit.r2 - 1.0).abs() < 1e-12, "{fit:?}");
            } else {
                // 0.5 n² + 3n is not exactly a + b n², but n² explains it best.
                assert!(fit.r2 > 0.999, "{fit:?}");
            }
            assert!(fit.clear);
        }
        let flat = fit("alloc.count", &points(|_| 42.0)).unwrap();
        assert_eq!((flat.shape.as_str(), flat.intercept), ("1", 42.0));
    }

    #[test]
    fn noise_without_growth_is_constant_or_unclear_and_two_points_are_not_enough() {
        let noise = [1.0, -1.0, 0.5, -0.5, 0.0];
        let xy: Vec<(f64, f64)> = points(|_| 0.0)
            .into_iter()
            .zip(noise)
            .map(|((x, _), e)| (x, 1000.0 + e))
            .collect();
        assert_eq!(fit("time.wall", &xy).unwrap().shape, "1");
        let wild: Vec<(f64, f64)> = points(|_| 0.0)
            .into_iter()
            .zip([5.0, 1.0, 9.0, 2.0, 6.0])
            .map(|((x, _), y)| (x, y))
            .collect();
        assert!(!fit("time.wall", &wild).unwrap().clear);
        assert!(fit("n", &[(1.0, 1.0), (2.0, 2.0), (2.0, 2.0)]).is_none());
    }

    #[test]
    fn sentences_say_the_shape_and_its_quality() {
        let f = fit("alloc.count", &points(|x| 2.0 * x)).unwrap();
        assert_eq!(
            f.sentence("n"),
            "alloc.count grows as n: 2.00 per unit of n, R^2 = 1.000"
        );
    }
}
