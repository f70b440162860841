//! The ROS utilisation model of the ROS paper (section 7.1.3):
//!
//! U = f_ext * t_ext + f_int * t_int + f_del * t_del + S * t_kB
//!
//! with f_ext the external (DataRequest) rate, f_int the internal fragment-retrieval rate
//! (fragments served per second), f_del the delete (L1) rate and S the kB/s sent. At the
//! maximum delete rate the node is saturated, U = 1, so every measured point gives one linear
//! equation in the four effective times. The fit is least squares with the times kept
//! non-negative (exact: every support subset is solved and the best feasible one kept). Since
//! each equation is the point's per-event costs divided by its inverse delete rate, it
//! minimises the relative error of the predicted inverse delete rate.
//!
//! Pure arithmetic on plain arrays: no state, no threads.

/// Names of the parameters, in order.
pub const NAMES: [&str; 4] = ["t_ext_s", "t_int_s", "t_del_s", "t_kb_s"];

/// One measured point: the four rates at the maximum delete rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// External requests per second.
    pub f_ext: f64,
    /// Fragments served per second.
    pub f_int: f64,
    /// Deletes (events cleared) per second.
    pub f_del: f64,
    /// kB (1000 bytes) sent per second.
    pub s_kb: f64,
}

impl Rates {
    fn as_array(&self) -> [f64; 4] {
        [self.f_ext, self.f_int, self.f_del, self.s_kb]
    }
}

/// Utilisation of a node with effective times `t` under `r`.
pub fn utilisation(t: &[f64; 4], r: &Rates) -> f64 {
    r.as_array().iter().zip(t).map(|(a, b)| a * b).sum()
}

/// Maximum delete rate (Hz) predicted for a mix whose per-event costs are `per_event`
/// (requests, fragments, 1, kB per event): the rate at which U reaches 1.
pub fn max_delete_rate(t: &[f64; 4], per_event: &[f64; 4]) -> f64 {
    let s: f64 = per_event.iter().zip(t).map(|(a, b)| a * b).sum();
    if s > 0.0 {
        1.0 / s
    } else {
        f64::INFINITY
    }
}

/// Solves the square system `m x = v` (Gaussian elimination, partial pivoting); `None` if
/// singular.
fn solve(mut m: Vec<Vec<f64>>, mut v: Vec<f64>) -> Option<Vec<f64>> {
    let n = v.len();
    for c in 0..n {
        let p = (c..n).max_by(|&a, &b| m[a][c].abs().total_cmp(&m[b][c].abs()))?;
        if m[p][c].abs() < 1e-12 {
            return None;
        }
        m.swap(c, p);
        v.swap(c, p);
        let (pivot_rows, rest) = m.split_at_mut(c + 1);
        let pivot = &pivot_rows[c];
        for (i, row) in rest.iter_mut().enumerate() {
            let k = row[c] / pivot[c];
            for (x, p) in row[c..].iter_mut().zip(&pivot[c..]) {
                *x -= k * p;
            }
            v[c + 1 + i] -= k * v[c];
        }
    }
    let mut x = vec![0.0; n];
    for c in (0..n).rev() {
        let s: f64 = (c + 1..n).map(|j| m[c][j] * x[j]).sum();
        x[c] = (v[c] - s) / m[c][c];
    }
    Some(x)
}

/// Fits the effective times to `points` (each saturated: U = 1). Least squares, every time
/// non-negative. `None` with no points or no non-degenerate solution.
pub fn fit(points: &[Rates]) -> Option<[f64; 4]> {
    if points.is_empty() {
        return None;
    }
    let rows: Vec<[f64; 4]> = points.iter().map(Rates::as_array).collect();
    // Columns scaled to unit norm for conditioning (rates differ by orders of magnitude).
    let mut scale = [0.0f64; 4];
    for (j, s) in scale.iter_mut().enumerate() {
        *s = rows.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt();
    }
    let residual = |t: &[f64; 4]| -> f64 {
        rows.iter()
            .map(|r| {
                let u: f64 = r.iter().zip(t).map(|(a, b)| a * b).sum();
                (u - 1.0) * (u - 1.0)
            })
            .sum()
    };
    let mut best: Option<([f64; 4], f64)> = None;
    for mask in 1u32..16 {
        let cols: Vec<usize> = (0..4)
            .filter(|j| mask & (1 << j) != 0 && scale[*j] > 0.0)
            .collect();
        if cols.len() != mask.count_ones() as usize {
            continue;
        }
        let n = cols.len();
        let mut m = vec![vec![0.0; n]; n];
        let mut v = vec![0.0; n];
        for r in &rows {
            for (a, &ca) in cols.iter().enumerate() {
                let xa = r[ca] / scale[ca];
                v[a] += xa;
                for (b, &cb) in cols.iter().enumerate() {
                    m[a][b] += xa * r[cb] / scale[cb];
                }
            }
        }
        let Some(x) = solve(m, v) else { continue };
        if x.iter().any(|&xi| xi < 0.0 || !xi.is_finite()) {
            continue;
        }
        let mut t = [0.0; 4];
        for (k, &c) in cols.iter().enumerate() {
            t[c] = x[k] / scale[c];
        }
        let res = residual(&t);
        if best.is_none_or(|(_, b)| res < b) {
            best = Some((t, res));
        }
    }
    best.map(|(t, _)| t)
}

/// Relative error of the rate `t` predicts for point `r` against its measured delete rate.
pub fn relative_error(t: &[f64; 4], r: &Rates) -> f64 {
    let d = r.f_del;
    if d <= 0.0 {
        return f64::INFINITY;
    }
    let pred = max_delete_rate(t, &[r.f_ext / d, r.f_int / d, 1.0, r.s_kb / d]);
    (pred - d).abs() / d
}

/// [`fit`], then once more without the outliers: points whose relative error exceeds three
/// times the median one (and 5%) are left out of the second fit. On a shared machine a point
/// measured while another process took the CPU would otherwise pull every time. Returns the
/// times and which points the final fit used (all of them if fewer than four would remain).
pub fn fit_trimmed(points: &[Rates]) -> Option<([f64; 4], Vec<bool>)> {
    let t = fit(points)?;
    let err: Vec<f64> = points.iter().map(|p| relative_error(&t, p)).collect();
    let mut sorted = err.clone();
    sorted.sort_by(f64::total_cmp);
    let cut = (3.0 * sorted[sorted.len() / 2]).max(0.05);
    let keep: Vec<bool> = err.iter().map(|&e| e <= cut).collect();
    let kept: Vec<Rates> = points
        .iter()
        .zip(&keep)
        .filter(|(_, &k)| k)
        .map(|(p, _)| *p)
        .collect();
    if kept.len() < 4 || kept.len() == points.len() {
        return Some((t, vec![true; points.len()]));
    }
    Some((fit(&kept)?, keep))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t: &[f64; 4], per_event: [f64; 4]) -> Rates {
        let d = max_delete_rate(t, &per_event);
        Rates {
            f_ext: per_event[0] * d,
            f_int: per_event[1] * d,
            f_del: d,
            s_kb: per_event[3] * d,
        }
    }

    #[test]
    fn recovers_known_times_and_predicts() {
        let t = [4e-6, 0.3e-6, 2e-6, 0.05e-6];
        let mut pts = Vec::new();
        for words in [300.0, 400.0] {
            for eb in [0.2, 0.5] {
                for roi in [2.0, 4.0] {
                    let frags = 0.7 * (1.0 - eb) * roi + eb * 24.0;
                    pts.push(point(
                        &t,
                        [0.7 + eb, frags, 1.0, frags * words * 4.0 / 1000.0],
                    ));
                }
            }
        }
        let got = fit(&pts).expect("fit");
        for (g, w) in got.iter().zip(&t) {
            assert!((g - w).abs() <= 1e-3 * w, "{got:?} vs {t:?}");
        }
        let held = [1.4, 7.0, 1.0, 7.0 * 1.8];
        let want = max_delete_rate(&t, &held);
        assert!((max_delete_rate(&got, &held) - want).abs() / want < 1e-3);
        assert!((utilisation(&got, &point(&t, held)) - 1.0).abs() < 1e-3);
    }

    #[test]
    fn times_stay_non_negative() {
        // Data that an unconstrained fit would explain with a negative time per kB.
        let pts: Vec<Rates> = (1..6)
            .map(|i| {
                let i = f64::from(i);
                Rates {
                    f_ext: 1e5 / i,
                    f_int: 1e6 / i,
                    f_del: 1e5 / i,
                    s_kb: 1e3 * i * i,
                }
            })
            .collect();
        let t = fit(&pts).expect("fit");
        assert!(t.iter().all(|&x| x >= 0.0), "{t:?}");
        assert!(fit(&[]).is_none());
    }

    #[test]
    fn trimmed_fit_ignores_an_outlier() {
        let t = [4e-6, 0.3e-6, 2e-6, 0.05e-6];
        let mut pts = Vec::new();
        // RoI sizes and L2 fractions vary too: with both fixed, requests and fragments per
        // event are linear in the EB fraction and the times are not identifiable.
        for words in [300.0, 450.0] {
            for eb in [0.2, 0.5] {
                for (l2, roi) in [(0.7, 4.0), (1.0, 2.0), (0.5, 3.0), (1.0, 4.0)] {
                    let frags = l2 * (1.0 - eb) * roi + eb * 24.0;
                    pts.push(point(
                        &t,
                        [l2 + eb, frags, 1.0, frags * words * 4.0 / 1000.0],
                    ));
                }
            }
        }
        // One point measured while the CPU was taken: half its real rate.
        let mut slow = pts[5];
        for x in [
            &mut slow.f_ext,
            &mut slow.f_int,
            &mut slow.f_del,
            &mut slow.s_kb,
        ] {
            *x *= 0.5;
        }
        pts[5] = slow;
        let (got, used) = fit_trimmed(&pts).expect("fit");
        assert!(!used[5] && used.iter().filter(|&&u| u).count() == pts.len() - 1);
        for (g, w) in got.iter().zip(&t) {
            assert!((g - w).abs() <= 1e-3 * w, "{got:?} vs {t:?}");
        }
    }
}
