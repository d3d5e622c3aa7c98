//! Wire tensors (little-endian bytes) to and from tch tensors, checking sizes first so a bad
//! payload is a 422, never a panic inside libtorch.

use tch::{Kind, Tensor};

use rlharness_arctic::engine::EngineError;
use rlharness_arctic::wire::{DType, Tensor as WireTensor};

fn kind_of(dtype: DType) -> Option<Kind> {
    Some(match dtype {
        DType::F32 => Kind::Float,
        DType::BF16 => Kind::BFloat16,
        DType::F16 => Kind::Half,
        DType::F64 => Kind::Double,
        DType::I64 => Kind::Int64,
        DType::I32 => Kind::Int,
        DType::I16 => Kind::Int16,
        DType::I8 => Kind::Int8,
        DType::U8 => Kind::Uint8,
        DType::Bool => Kind::Bool,
        _ => return None,
    })
}

/// A CPU tch tensor with the wire tensor's dtype and shape. `name` names it in errors. A dtype
/// libtorch has no direct kind for here (unsigned wider than 8 bits, the 8-bit floats) is read
/// by value, as I64 for integers and F64 for floats.
pub fn to_tch(name: &str, t: &WireTensor) -> Result<Tensor, EngineError> {
    let numel: usize = t.shape.iter().product();
    let want = t.dtype.byte_len(numel).ok_or_else(|| {
        EngineError::unprocessable(format!("tensor {name}: shape {:?} overflows", t.shape))
    })?;
    if t.data.len() != want {
        return Err(EngineError::unprocessable(format!(
            "tensor {name}: {} bytes for {} of shape {:?} (expected {want})",
            t.data.len(),
            t.dtype.name(),
            t.shape
        )));
    }
    let shape: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
    let bad = |e: rlharness_arctic::wire::WireError| {
        EngineError::unprocessable(format!("tensor {name}: {e}"))
    };
    match kind_of(t.dtype) {
        // Both sides are little-endian on every platform libtorch supports here.
        Some(kind) => Ok(Tensor::from_data_size(&t.data, &shape, kind)),
        None if t.dtype.is_integer() => {
            Ok(Tensor::from_slice(&t.to_i64_vec().map_err(bad)?).reshape(&shape))
        }
        None => Ok(Tensor::from_slice(&t.to_f64_vec().map_err(bad)?).reshape(&shape)),
    }
}

/// A 2-D `[B,S]` tensor as the given kind on CPU, with its dims.
pub fn to_tch_2d(
    name: &str,
    t: &WireTensor,
    kind: Kind,
) -> Result<(Tensor, i64, i64), EngineError> {
    if t.shape.len() != 2 {
        return Err(EngineError::unprocessable(format!(
            "tensor {name} must be 2-D [B,S], got shape {:?}",
            t.shape
        )));
    }
    let x = to_tch(name, t)?.to_kind(kind);
    Ok((x, t.shape[0] as i64, t.shape[1] as i64))
}

/// A float tensor back to the wire as F32.
pub fn to_wire_f32(t: &Tensor) -> Result<WireTensor, EngineError> {
    let t = t
        .to_device(tch::Device::Cpu)
        .to_kind(Kind::Float)
        .contiguous();
    let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
    let flat = t.reshape([-1]);
    let values = Vec::<f32>::try_from(&flat)
        .map_err(|e| EngineError::internal(format!("cannot read result tensor: {e}")))?;
    Ok(rlharness_arctic::engine::f32_tensor(shape, &values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn round_trips_and_rejects_short_data() {
        let w = rlharness_arctic::engine::f32_tensor(vec![2, 2], &[1.0, -2.0, 3.5, 0.25]);
        let t = to_tch("x", &w).unwrap();
        assert_eq!(t.size(), vec![2, 2]);
        assert_eq!(to_wire_f32(&t).unwrap(), w);
        let ints = WireTensor {
            dtype: DType::I64,
            shape: vec![1, 2],
            data: Bytes::from([7i64.to_le_bytes(), (-1i64).to_le_bytes()].concat()),
        };
        let (t, b, s) = to_tch_2d("ids", &ints, Kind::Int64).unwrap();
        assert_eq!((b, s), (1, 2));
        assert_eq!(t.int64_value(&[0, 1]), -1);
        let short = WireTensor {
            dtype: DType::F32,
            shape: vec![3],
            data: Bytes::from_static(&[0u8; 8]),
        };
        let err = to_tch("old_log_probs", &short).unwrap_err();
        assert_eq!(err.status, 422);
        assert!(err.detail.contains("old_log_probs"), "{}", err.detail);
        assert!(to_tch_2d("ids", &w.clone(), Kind::Int64).is_ok());
        let one_d = rlharness_arctic::engine::f32_tensor(vec![4], &[0.0; 4]);
        assert!(to_tch_2d("ids", &one_d, Kind::Int64)
            .unwrap_err()
            .detail
            .contains("2-D"));
    }
}
