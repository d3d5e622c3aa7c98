//! The seeds of a multi-seed run or calibration as a scenario or the command line writes them.

/// Why a seed range does not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SeedRangeError {
    #[error("seeds: `{0}` is not a seed (expected `A..B`, e.g. `1..10`)")]
    NotASeed(String),
    #[error("seeds {0}: the first seed is after the last")]
    Reversed(String),
    #[error("seeds {0}: more than 1000 seeds")]
    TooMany(String),
}

/// `A..B` (inclusive) or a single seed.
pub(crate) fn parse_seed_range(text: &str) -> Result<Vec<u64>, SeedRangeError> {
    let num = |t: &str| {
        t.trim()
            .parse::<u64>()
            .map_err(|_| SeedRangeError::NotASeed(t.to_string()))
    };
    let (a, b) = match text.split_once("..") {
        Some((a, b)) => (num(a)?, num(b)?),
        None => (num(text)?, num(text)?),
    };
    if a > b {
        return Err(SeedRangeError::Reversed(text.to_string()));
    }
    if b - a >= 1000 {
        return Err(SeedRangeError::TooMany(text.to_string()));
    }
    Ok((a..=b).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_ranges() {
        assert_eq!(parse_seed_range("1..3").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_seed_range("7").unwrap(), vec![7]);
        assert!(parse_seed_range("3..1")
            .unwrap_err()
            .to_string()
            .contains("after"));
        assert!(parse_seed_range("a..b")
            .unwrap_err()
            .to_string()
            .contains("`a`"));
        assert!(parse_seed_range("1..5000")
            .unwrap_err()
            .to_string()
            .contains("1000"));
    }
}
