//! The one percentile rule of the system: nearest rank. The simulator's
//! reports, the evaluation, the scheduler's policy-stability record and
//! the benchmarks all use it, so a p50 means the same everywhere.

/// The nearest-rank `p`-quantile (`0 < p <= 1`) of `sorted` (ascending):
/// the smallest value with at least a fraction `p` of the values at or
/// below it. None for no values.
pub fn nearest_rank<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_takes_the_smallest_value_covering_the_fraction() {
        let v: Vec<u32> = (1..=10).collect();
        assert_eq!(nearest_rank(&v, 0.5), Some(5));
        assert_eq!(nearest_rank(&v, 0.9), Some(9));
        assert_eq!(nearest_rank(&v, 0.91), Some(10));
        assert_eq!(nearest_rank(&v, 1.0), Some(10));
        assert_eq!(nearest_rank(&v, 0.0), Some(1), "the first value at least");
        assert_eq!(nearest_rank(&[7u64], 0.99), Some(7));
        assert_eq!(nearest_rank::<u64>(&[], 0.5), None);
    }
}
