//! Which commit to test next: a binary search over the line `good, c1, …, bad` (indices 0 to
//! n), between the last commit known good and the first known bad. A commit that cannot be
//! told (it does not run, or its seeds stay unclear) is skipped as `git bisect skip` does: the
//! search tries its nearest untested neighbour instead, and when only skipped commits are left
//! between the two, the answer is the set they span.

use std::collections::BTreeMap;

use super::Verdict;

/// The search's state over a line of `n + 1` commits (0 good, n bad).
#[derive(Debug, Clone)]
pub(crate) struct Search {
    n: usize,
    known: BTreeMap<usize, Verdict>,
}

/// Where the search stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Test this commit.
    Test(usize),
    /// The first bad commit.
    Found(usize),
    /// Only skipped commits lie between the last good and the first bad: any of these (the
    /// skipped ones and the first bad) may be it.
    Among(Vec<usize>),
}

impl Search {
    pub(crate) fn new(n: usize) -> Search {
        let mut known = BTreeMap::new();
        known.insert(0, Verdict::Good);
        known.insert(n, Verdict::Bad);
        Search { n, known }
    }

    pub(crate) fn record(&mut self, index: usize, verdict: Verdict) {
        self.known.insert(index, verdict);
    }

    /// The last good below the first bad, and that first bad.
    fn bounds(&self) -> (usize, usize) {
        let bad = self
            .known
            .iter()
            .find(|(_, v)| **v == Verdict::Bad)
            .map_or(self.n, |(i, _)| *i);
        let good = self
            .known
            .range(..bad)
            .rev()
            .find(|(_, v)| **v == Verdict::Good)
            .map_or(0, |(i, _)| *i);
        (good, bad)
    }

    pub(crate) fn next(&self) -> Next {
        let (good, bad) = self.bounds();
        let open: Vec<usize> = (good + 1..bad)
            .filter(|i| !self.known.contains_key(i))
            .collect();
        if open.is_empty() {
            return if bad == good + 1 {
                Next::Found(bad)
            } else {
                Next::Among((good + 1..=bad).collect())
            };
        }
        // The untested commit nearest the middle (the lower one on a tie).
        let mid2 = good + bad; // twice the middle
        let pick = open
            .iter()
            .copied()
            .min_by_key(|i| (2 * i).abs_diff(mid2))
            .unwrap_or(open[0]);
        Next::Test(pick)
    }

    /// About how many more tests the search needs, if none is skipped: ⌈log₂⌉ of the
    /// commits the first bad may still be.
    pub(crate) fn steps_left(&self) -> usize {
        let (good, bad) = self.bounds();
        let span = bad - good;
        (usize::BITS - (span.max(1) - 1).leading_zeros()) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole search against a line whose first bad commit is `first`, skipping `skip`:
    /// the answer and the commits tested.
    fn run(n: usize, first: usize, skip: &[usize]) -> (Next, Vec<usize>) {
        let mut s = Search::new(n);
        let mut tested = Vec::new();
        loop {
            match s.next() {
                Next::Test(i) => {
                    tested.push(i);
                    let v = if skip.contains(&i) {
                        Verdict::Skip
                    } else if i >= first {
                        Verdict::Bad
                    } else {
                        Verdict::Good
                    };
                    s.record(i, v);
                }
                other => return (other, tested),
            }
        }
    }

    #[test]
    fn finds_every_first_bad_commit_of_eight_in_three_tests() {
        for first in 1..=8 {
            let (answer, tested) = run(8, first, &[]);
            assert_eq!(answer, Next::Found(first));
            assert!(tested.len() <= 3, "{first}: {tested:?}");
        }
        assert_eq!(Search::new(8).steps_left(), 3);
        assert_eq!(Search::new(1).steps_left(), 0);
    }

    #[test]
    fn a_skipped_commit_is_stepped_around() {
        let (answer, tested) = run(8, 5, &[6]);
        assert_eq!(answer, Next::Found(5));
        assert_eq!(tested, [4, 6, 5]);
    }

    #[test]
    fn only_skipped_commits_in_between_leave_a_set() {
        let (answer, _) = run(4, 2, &[1, 2]);
        // 3 is bad, 1 and 2 cannot be told: any of 1, 2, 3.
        assert_eq!(answer, Next::Among(vec![1, 2, 3]));
    }
}
