//! JSON has no NaN or infinity; verdict.json writes them as the strings `NaN`, `inf`, `-inf`
//! so a non-finite value stays visible instead of becoming `null`.

use serde::{Deserialize, Deserializer, Serializer};

pub(crate) fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        None => s.serialize_none(),
        Some(x) if x.is_finite() => s.serialize_f64(*x),
        Some(x) => s.serialize_str(&super::format_value(*x)),
    }
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum N {
        F(f64),
        S(String),
    }
    match Option::<N>::deserialize(d)? {
        None => Ok(None),
        Some(N::F(f)) => Ok(Some(f)),
        Some(N::S(s)) => super::parse_value(&s)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("`{s}` is not a number"))),
    }
}
