//! One figure of `replaystore bench`'s table: its runs, and the median and range of
//! them. Its own module so that the workload runners (`bench`, `w3`) both fill rows
//! without importing each other.

/// One line of the table.
pub(crate) struct Row {
    pub name: String,
    pub values: Vec<f64>,
    pub unit: &'static str,
    pub data_bytes: u64,
    pub written_bytes: Vec<u64>,
    /// The same work by the plainest kernel on this host (`floor.rs`), in `unit`: the
    /// best of as many runs as `values` (a floor is what the host can do).
    pub floor: Option<f64>,
}

impl Row {
    pub fn new(name: String, unit: &'static str, data_bytes: u64) -> Row {
        Row {
            name,
            values: Vec::new(),
            unit,
            data_bytes,
            written_bytes: Vec::new(),
            floor: None,
        }
    }

    pub fn median(&self) -> f64 {
        median(&self.values)
    }

    /// The 99th percentile (nearest rank), given only for 20 or more values: fewer say
    /// nothing about a tail.
    pub fn p99(&self) -> Option<f64> {
        (self.values.len() >= 20).then(|| quantile(&self.values, 0.99))
    }

    /// The median as a percentage of the floor (a rate: higher is better).
    pub fn of_floor(&self) -> Option<f64> {
        self.floor.map(|f| 100.0 * self.median() / f)
    }
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

pub(crate) fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// The `q` quantile (0..=1) of `values`, nearest rank.
pub(crate) fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v.get(rank - 1).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::quantile;

    #[test]
    fn quantile_is_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.99), 3.0);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
