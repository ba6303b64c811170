//! Batches cut to a size: one call or request per run, so that no batch passes what its
//! receiver takes (gRPC's 4 MiB decode limit, an app server's body limit).

/// Splits `items`, in order, into runs whose `size`s add up to at most `max` (an item
/// larger than `max` makes a run of its own).
pub fn within<T>(items: Vec<T>, max: usize, size: impl Fn(&T) -> usize) -> Vec<Vec<T>> {
    let mut runs: Vec<Vec<T>> = Vec::new();
    let mut bytes = 0;
    for item in items {
        let len = size(&item);
        match runs.last_mut() {
            Some(run) if bytes + len <= max => run.push(item),
            _ => {
                runs.push(vec![item]);
                bytes = 0;
            }
        }
        bytes += len;
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_stay_within_their_size_in_order_and_an_oversized_item_goes_alone() {
        let runs = |sizes: &[usize], max| within(sizes.to_vec(), max, |n| *n);
        assert_eq!(
            runs(&[38, 48, 28, 98, 18, 18], 65),
            vec![vec![38], vec![48], vec![28], vec![98], vec![18, 18]]
        );
        assert_eq!(runs(&[28, 28, 58], 65), vec![vec![28, 28], vec![58]]);
        assert_eq!(runs(&[30, 35], 65), vec![vec![30, 35]]);
        assert!(runs(&[], 65).is_empty());
    }
}
