//! [`Tensor`]: a dtype, a shape and little-endian element bytes; building one from a slice and
//! reading its elements back.

use bytes::Bytes;
use serde_json::Value;

use super::dtype::{element_f64, DType};
use super::WireError;
use crate::wire::pyjson;

/// A dense tensor: little-endian element bytes in row-major order.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Bytes,
}

/// Number of elements of `shape`, or `None` on overflow (a hostile header can claim anything).
pub(super) fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Values as their little-endian bytes, one allocation of the exact size (the data of a
/// tensor built from a slice).
pub fn le_bytes<T, const N: usize>(values: &[T], bytes_of: impl Fn(&T) -> [u8; N]) -> Bytes {
    let mut data = Vec::with_capacity(values.len() * N);
    for v in values {
        data.extend_from_slice(&bytes_of(v));
    }
    Bytes::from(data)
}

impl Tensor {
    /// A tensor whose byte length is checked against its dtype and shape.
    pub fn new(dtype: DType, shape: Vec<usize>, data: Bytes) -> Result<Tensor, WireError> {
        let t = Tensor { dtype, shape, data };
        t.check_len()?;
        Ok(t)
    }

    pub(crate) fn numel(&self) -> usize {
        checked_numel(&self.shape).unwrap_or(usize::MAX)
    }

    /// Bytes the data must have for this dtype and shape.
    pub(crate) fn expected_len(&self) -> Option<usize> {
        self.dtype.byte_len(checked_numel(&self.shape)?)
    }

    pub(super) fn check_len(&self) -> Result<(), WireError> {
        match self.expected_len() {
            Some(n) if n == self.data.len() => Ok(()),
            Some(n) => Err(WireError::Encode(format!(
                "{} tensor of shape {:?} needs {n} bytes, got {}",
                self.dtype,
                self.shape,
                self.data.len()
            ))),
            None => Err(WireError::Encode(format!(
                "{} tensor of shape {:?} overflows the address space",
                self.dtype, self.shape
            ))),
        }
    }

    fn from_le<const N: usize, T>(
        dtype: DType,
        shape: Vec<usize>,
        values: &[T],
        to_bytes: impl Fn(&T) -> [u8; N],
    ) -> Result<Tensor, WireError> {
        Tensor::new(dtype, shape, le_bytes(values, to_bytes))
    }

    pub fn from_f32(shape: impl Into<Vec<usize>>, values: &[f32]) -> Result<Tensor, WireError> {
        Self::from_le(DType::F32, shape.into(), values, |v| v.to_le_bytes())
    }

    /// An F32 slice stored as BF16 (round to nearest even), the dtype verl ships log-probs in.
    pub fn from_f32_as_bf16(
        shape: impl Into<Vec<usize>>,
        values: &[f32],
    ) -> Result<Tensor, WireError> {
        Self::from_le(DType::BF16, shape.into(), values, |v| {
            half::bf16::from_f32(*v).to_le_bytes()
        })
    }

    #[cfg(test)]
    pub(crate) fn from_f64(
        shape: impl Into<Vec<usize>>,
        values: &[f64],
    ) -> Result<Tensor, WireError> {
        Self::from_le(DType::F64, shape.into(), values, |v| v.to_le_bytes())
    }

    pub fn from_i64(shape: impl Into<Vec<usize>>, values: &[i64]) -> Result<Tensor, WireError> {
        Self::from_le(DType::I64, shape.into(), values, |v| v.to_le_bytes())
    }

    #[cfg(test)]
    pub(crate) fn from_i32(
        shape: impl Into<Vec<usize>>,
        values: &[i32],
    ) -> Result<Tensor, WireError> {
        Self::from_le(DType::I32, shape.into(), values, |v| v.to_le_bytes())
    }

    #[cfg(test)]
    pub(crate) fn from_bool(
        shape: impl Into<Vec<usize>>,
        values: &[bool],
    ) -> Result<Tensor, WireError> {
        Self::from_le(DType::Bool, shape.into(), values, |v| [u8::from(*v)])
    }

    /// Every element as f32, whatever the dtype (integers and booleans convert by value, F64
    /// rounds; complex and packed sub-byte elements, which have no single real value, read as
    /// NaN). Trailing bytes that do not make a whole element are ignored.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        let d = &self.data[..];
        match self.dtype {
            DType::F32 => chunks::<4, _>(d, f32::from_le_bytes),
            DType::BF16 => chunks::<2, _>(d, |b| half::bf16::from_le_bytes(b).to_f32()),
            dt => d
                .chunks_exact(dt.size())
                .map(|c| element_f64(dt, c).unwrap_or(f64::NAN) as f32)
                .collect(),
        }
    }

    /// Every element as f64; an error for complex and packed sub-byte dtypes, which no route
    /// computes with (the real server's torch code would fail on them too).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>, WireError> {
        let dt = self.dtype;
        self.data
            .chunks_exact(dt.size())
            .map(|c| {
                element_f64(dt, c).ok_or_else(|| {
                    WireError::Tree(format!(
                        "cannot compute with a {dt} tensor of shape {:?}: its elements are not real numbers",
                        self.shape
                    ))
                })
            })
            .collect()
    }

    /// Every element as i64; only integer and boolean tensors qualify (a float tensor here is
    /// a caller reading the wrong field, not something to round silently).
    pub fn to_i64_vec(&self) -> Result<Vec<i64>, WireError> {
        let d = &self.data[..];
        let not_int = || {
            WireError::Tree(format!(
                "expected an integer tensor, got {} of shape {:?}",
                self.dtype, self.shape
            ))
        };
        Ok(match self.dtype {
            DType::I64 => chunks::<8, _>(d, i64::from_le_bytes),
            DType::I32 => chunks::<4, _>(d, |b| i64::from(i32::from_le_bytes(b))),
            DType::U32 => chunks::<4, _>(d, |b| i64::from(u32::from_le_bytes(b))),
            DType::I16 => chunks::<2, _>(d, |b| i64::from(i16::from_le_bytes(b))),
            DType::U16 => chunks::<2, _>(d, |b| i64::from(u16::from_le_bytes(b))),
            DType::U8 => d.iter().map(|&b| i64::from(b)).collect(),
            DType::I8 => d.iter().map(|&b| i64::from(b as i8)).collect(),
            DType::Bool => d.iter().map(|&b| i64::from(b != 0)).collect(),
            DType::U64 => chunks::<8, _>(d, u64::from_le_bytes)
                .into_iter()
                .map(|v| i64::try_from(v).map_err(|_| not_int()))
                .collect::<Result<_, _>>()?,
            _ => return Err(not_int()),
        })
    }

    /// The value of a one-element tensor (a 0-d tensor where a number is expected) as JSON:
    /// an integer for integer dtypes, `true`/`false` for BOOL, a float otherwise (non-finite
    /// ones as [`pyjson::float`] writes them).
    pub(crate) fn scalar_json(&self) -> Option<Value> {
        if self.numel() != 1 {
            return None;
        }
        match self.dtype {
            DType::Bool => Some(Value::Bool(self.data.first().copied()? != 0)),
            DType::U64 => {
                let v = u64::from_le_bytes(self.data.get(..8)?.try_into().ok()?);
                Some(Value::from(v))
            }
            dt if dt.is_integer() => Some(Value::from(*self.to_i64_vec().ok()?.first()?)),
            dt => Some(pyjson::float(element_f64(dt, &self.data)?)),
        }
    }

    /// `{"dtype": "BF16", "shape": [B, S]}`: what logs show of a tensor.
    pub(crate) fn summary(&self) -> Value {
        serde_json::json!({"dtype": self.dtype.name(), "shape": self.shape})
    }
}

fn chunks<const N: usize, T>(d: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    d.chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            f(a)
        })
        .collect()
}
