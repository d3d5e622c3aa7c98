//! The element types a frame carries ([`DType`]) and the reading of one element as a real
//! number, 8-bit floats included.

use safetensors::Dtype;

/// Tensor element types the frame carries: every dtype the safetensors container names (the
/// real codec takes any torch tensor, so any of them can arrive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DType {
    #[serde(rename = "BOOL")]
    Bool,
    F4,
    #[serde(rename = "F6_E2M3")]
    F6E2M3,
    #[serde(rename = "F6_E3M2")]
    F6E3M2,
    U8,
    I8,
    #[serde(rename = "F8_E5M2")]
    F8E5M2,
    #[serde(rename = "F8_E4M3")]
    F8E4M3,
    #[serde(rename = "F8_E8M0")]
    F8E8M0,
    #[serde(rename = "F8_E4M3FNUZ")]
    F8E4M3Fnuz,
    #[serde(rename = "F8_E5M2FNUZ")]
    F8E5M2Fnuz,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
}

impl DType {
    pub const ALL: [DType; 22] = [
        DType::Bool,
        DType::F4,
        DType::F6E2M3,
        DType::F6E3M2,
        DType::U8,
        DType::I8,
        DType::F8E5M2,
        DType::F8E4M3,
        DType::F8E8M0,
        DType::F8E4M3Fnuz,
        DType::F8E5M2Fnuz,
        DType::I16,
        DType::U16,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::U32,
        DType::F32,
        DType::C64,
        DType::F64,
        DType::I64,
        DType::U64,
    ];

    /// Bits of one element (4 and 6 for the packed micro-scaling floats).
    pub fn bits(self) -> usize {
        self.to_safetensors().bitsize()
    }

    /// Bytes of one element, rounded up (1 for the packed sub-byte floats: use
    /// [`DType::byte_len`] for lengths).
    pub fn size(self) -> usize {
        self.bits().div_ceil(8)
    }

    /// Bytes that `numel` elements take, or `None` on overflow or when sub-byte elements do
    /// not fill whole bytes (the container refuses such a tensor).
    pub fn byte_len(self, numel: usize) -> Option<usize> {
        let bits = numel.checked_mul(self.bits())?;
        (bits % 8 == 0).then_some(bits / 8)
    }

    /// The safetensors name (`F32`, `BF16`, `F8_E4M3`, ..., `BOOL`).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "BOOL",
            DType::F4 => "F4",
            DType::F6E2M3 => "F6_E2M3",
            DType::F6E3M2 => "F6_E3M2",
            DType::U8 => "U8",
            DType::I8 => "I8",
            DType::F8E5M2 => "F8_E5M2",
            DType::F8E4M3 => "F8_E4M3",
            DType::F8E8M0 => "F8_E8M0",
            DType::F8E4M3Fnuz => "F8_E4M3FNUZ",
            DType::F8E5M2Fnuz => "F8_E5M2FNUZ",
            DType::I16 => "I16",
            DType::U16 => "U16",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I32 => "I32",
            DType::U32 => "U32",
            DType::F32 => "F32",
            DType::C64 => "C64",
            DType::F64 => "F64",
            DType::I64 => "I64",
            DType::U64 => "U64",
        }
    }

    /// Whether elements are integers (booleans included): token ids and masks.
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            DType::Bool
                | DType::U8
                | DType::I8
                | DType::I16
                | DType::U16
                | DType::I32
                | DType::U32
                | DType::I64
                | DType::U64
        )
    }

    pub(super) fn to_safetensors(self) -> Dtype {
        match self {
            DType::Bool => Dtype::BOOL,
            DType::F4 => Dtype::F4,
            DType::F6E2M3 => Dtype::F6_E2M3,
            DType::F6E3M2 => Dtype::F6_E3M2,
            DType::U8 => Dtype::U8,
            DType::I8 => Dtype::I8,
            DType::F8E5M2 => Dtype::F8_E5M2,
            DType::F8E4M3 => Dtype::F8_E4M3,
            DType::F8E8M0 => Dtype::F8_E8M0,
            DType::F8E4M3Fnuz => Dtype::F8_E4M3FNUZ,
            DType::F8E5M2Fnuz => Dtype::F8_E5M2FNUZ,
            DType::I16 => Dtype::I16,
            DType::U16 => Dtype::U16,
            DType::F16 => Dtype::F16,
            DType::BF16 => Dtype::BF16,
            DType::I32 => Dtype::I32,
            DType::U32 => Dtype::U32,
            DType::F32 => Dtype::F32,
            DType::C64 => Dtype::C64,
            DType::F64 => Dtype::F64,
            DType::I64 => Dtype::I64,
            DType::U64 => Dtype::U64,
        }
    }

    pub(super) fn from_safetensors(dtype: Dtype) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.to_safetensors() == dtype)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One element of a dtype as `f64`. `None` for what has no single real value: complex numbers
/// and the packed sub-byte floats.
pub(super) fn element_f64(dtype: DType, b: &[u8]) -> Option<f64> {
    let a = |n: usize| -> Option<[u8; 8]> {
        let mut out = [0u8; 8];
        out[..n].copy_from_slice(b.get(..n)?);
        Some(out)
    };
    Some(match dtype {
        DType::Bool => f64::from(u8::from(*b.first()? != 0)),
        DType::U8 => f64::from(*b.first()?),
        DType::I8 => f64::from(*b.first()? as i8),
        DType::I16 => f64::from(i16::from_le_bytes([*b.first()?, *b.get(1)?])),
        DType::U16 => f64::from(u16::from_le_bytes([*b.first()?, *b.get(1)?])),
        DType::F16 => half::f16::from_le_bytes([*b.first()?, *b.get(1)?]).to_f64(),
        DType::BF16 => half::bf16::from_le_bytes([*b.first()?, *b.get(1)?]).to_f64(),
        DType::I32 => f64::from(i32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
        DType::U32 => f64::from(u32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
        DType::F32 => f64::from(f32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
        DType::F64 => f64::from_le_bytes(a(8)?),
        DType::I64 => i64::from_le_bytes(a(8)?) as f64,
        DType::U64 => u64::from_le_bytes(a(8)?) as f64,
        DType::F8E4M3 => f8_value(*b.first()?, 3, 7, F8Kind::Fn),
        DType::F8E5M2 => f8_value(*b.first()?, 2, 15, F8Kind::Ieee),
        DType::F8E4M3Fnuz => f8_value(*b.first()?, 3, 8, F8Kind::Fnuz),
        DType::F8E5M2Fnuz => f8_value(*b.first()?, 2, 16, F8Kind::Fnuz),
        DType::F8E8M0 => match *b.first()? {
            0xff => f64::NAN,
            e => 2f64.powi(i32::from(e) - 127),
        },
        DType::F4 | DType::F6E2M3 | DType::F6E3M2 | DType::C64 => return None,
    })
}

/// How an 8-bit float spends its special encodings.
#[derive(Clone, Copy)]
enum F8Kind {
    /// IEEE style: the top exponent holds infinities and NaNs (E5M2).
    Ieee,
    /// "Finite" (E4M3FN): no infinities, only all-ones is NaN.
    Fn,
    /// "Finite, unsigned zero" (FNUZ): `0x80` is the only NaN, no infinities, no -0.
    Fnuz,
}

fn f8_value(byte: u8, mant_bits: u32, bias: i32, kind: F8Kind) -> f64 {
    let exp_bits = 7 - mant_bits;
    let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((byte >> mant_bits) & ((1 << exp_bits) - 1) as u8);
    let m = f64::from(byte & ((1 << mant_bits) - 1) as u8);
    let scale = f64::from(1u32 << mant_bits);
    let max_e = (1 << exp_bits) - 1;
    match kind {
        F8Kind::Fnuz if byte == 0x80 => return f64::NAN,
        F8Kind::Fn if byte & 0x7f == 0x7f => return f64::NAN,
        F8Kind::Ieee if e == max_e => {
            return if m == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        _ => {}
    }
    if e == 0 {
        sign * (m / scale) * 2f64.powi(1 - bias)
    } else {
        sign * (1.0 + m / scale) * 2f64.powi(e - bias)
    }
}
