//! Compiled loops of Meridian's record codec (`dataplane.records`).
//!
//! `scan_records` is `dataplane.records.validation._scan` compiled: the same walk over a
//! batch's records, the same checks in the same order, the same fault reasons, and the
//! same count of records carrying a header named `marker` (the broker's `x-deliver-at`).
//! `decode_records` (`decode.rs`) is `dataplane.records.decoder._decode` compiled: the
//! same records, built the same way, and the same errors with the same messages.
//! `ColumnBuilder` (`columns.rs`) is `dataplane.records.columns.ColumnsReference`
//! compiled: the same columns, in Arrow's buffer layout, and the same errors.
//! `copy_records` (`copy.rs`) is `dataplane.records.copying._copy_records` compiled.
//! The Python functions stay the reference; the tests compare each pair on random,
//! damaged and crafted batches.

mod columns;
mod copy;
mod decode;
mod encode;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Why a record is bad: its index, the reason, and the offset delta when that is the fault.
struct Fault {
    index: u64,
    reason: String,
    delta: Option<i64>,
}

/// What went wrong while reading one field.
enum Stop {
    /// A read past the end of the data (Python's `IndexError`).
    PastEnd,
    /// A varint too long or out of range (Python's `ValueError`, with its message).
    Varint(String),
    /// A fault found by the scan itself.
    Fault(Fault),
}

const UINT32_LIMIT: u64 = 1 << 32;

fn byte(data: &[u8], pos: u64) -> Result<u64, Stop> {
    usize::try_from(pos)
        .ok()
        .and_then(|at| data.get(at))
        .map(|b| u64::from(*b))
        .ok_or(Stop::PastEnd)
}

fn zigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// A raw int32 varint as Kafka's `readVarint` takes it: at most 5 bytes, 32 bits.
fn uvarint32(data: &[u8], mut pos: u64) -> Result<(u64, u64), Stop> {
    let mut result: u64 = 0;
    for shift in (0..35).step_by(7) {
        let b = byte(data, pos)?;
        pos += 1;
        result |= (b & 0x7F) << shift;
        if b < 0x80 {
            if result >= UINT32_LIMIT {
                return Err(Stop::Varint(format!("a varint {result} past int32")));
            }
            return Ok((result, pos));
        }
    }
    Err(Stop::Varint("a varint longer than 5 bytes".to_string()))
}

/// A raw int64 varlong: at most 10 bytes, 64 bits.
fn uvarint64(data: &[u8], mut pos: u64) -> Result<(u64, u64), Stop> {
    let mut result: u128 = 0;
    for shift in (0..70).step_by(7) {
        let b = byte(data, pos)?;
        pos += 1;
        result |= u128::from(b & 0x7F) << shift;
        if b < 0x80 {
            if result >= 1u128 << 64 {
                return Err(Stop::Varint(format!("a varlong {result} past int64")));
            }
            return Ok((result as u64, pos));
        }
    }
    Err(Stop::Varint("a varlong longer than 10 bytes".to_string()))
}

/// The one- and two-byte forms inline, longer ones through `uvarint32`.
fn varint32(data: &[u8], pos: u64) -> Result<(u64, u64), Stop> {
    let u = byte(data, pos)?;
    if u < 0x80 {
        return Ok((u, pos + 1));
    }
    let b = byte(data, pos + 1)?;
    if b < 0x80 {
        return Ok((u - 0x80 + (b << 7), pos + 2));
    }
    uvarint32(data, pos)
}

fn fault(index: u64, reason: String) -> Stop {
    Stop::Fault(Fault { index, reason, delta: None })
}

struct Scan {
    count: u64,
    low: i128,
    high: i128,
    marked: u64,
}

fn scan(data: &[u8], mut pos: u64, end: u64, marker: &[u8]) -> Result<Scan, Fault> {
    let mut low: i128 = 1 << 64;
    let mut high: i128 = -(1 << 64);
    let mut marked: u64 = 0;
    let mut expected: u64 = 0; // the raw offset delta of the next record: twice its index
    while pos < end {
        let index = expected >> 1;
        let mut bounds = Bounds { low: &mut low, high: &mut high, marked: &mut marked, marker };
        pos = record(data, pos, end, expected, &mut bounds).map_err(|stop| match stop {
            Stop::Fault(fault) => fault,
            Stop::PastEnd => Fault {
                index,
                reason: "fields past the end of the batch".to_string(),
                delta: None,
            },
            Stop::Varint(reason) => Fault { index, reason, delta: None },
        })?;
        expected += 2;
    }
    Ok(Scan { count: expected >> 1, low, high, marked })
}

/// What the walk gathers across records: the timestamp delta bounds and the records
/// carrying a header named `marker` (none when `marker` is empty).
struct Bounds<'a> {
    low: &'a mut i128,
    high: &'a mut i128,
    marked: &'a mut u64,
    marker: &'a [u8],
}

/// Past the record at ``pos`` whose raw offset delta must be ``expected``.
fn record(
    data: &[u8],
    mut pos: u64,
    end: u64,
    expected: u64,
    bounds: &mut Bounds<'_>,
) -> Result<u64, Stop> {
    let index = expected >> 1;
    let (u, at) = varint32(data, pos)?;
    pos = at;
    let stop = pos + (u >> 1);
    if u & 1 == 1 || stop > end {
        let left = end as i64 - pos as i64;
        return Err(fault(index, format!("length {}, {left} bytes left", zigzag(u))));
    }
    let attributes = byte(data, pos)?;
    if attributes != 0 {
        return Err(fault(index, format!("attributes {attributes}, not 0")));
    }
    let u = byte(data, pos + 1)?;
    let delta = if u < 0x80 {
        pos += 2;
        zigzag(u)
    } else {
        let b = byte(data, pos + 2)?;
        if b < 0x80 {
            pos += 3;
            zigzag(u - 0x80 + (b << 7))
        } else {
            let (u, at) = uvarint64(data, pos + 1)?;
            pos = at;
            zigzag(u)
        }
    };
    *bounds.high = (*bounds.high).max(i128::from(delta));
    *bounds.low = (*bounds.low).min(i128::from(delta));
    let (u, at) = varint32(data, pos)?;
    pos = at;
    if u != expected {
        let reason = "offset delta".to_string();
        return Err(Stop::Fault(Fault { index, reason, delta: Some(zigzag(u)) }));
    }
    pos = skip_bytes(data, pos, index, "key")?;
    pos = skip_bytes(data, pos, index, "value")?;
    if byte(data, pos)? == 0 {
        pos += 1;
    } else {
        let (after, marked) = scan_headers(data, pos, stop, index, bounds.marker)?;
        pos = after;
        if marked {
            *bounds.marked += 1;
        }
    }
    if pos != stop {
        return Err(fault(index, "fields that do not fill its length".to_string()));
    }
    Ok(pos)
}

/// Past a nullable length-prefixed field (`what`: "key" or "value").
fn skip_bytes(data: &[u8], pos: u64, index: u64, what: &str) -> Result<u64, Stop> {
    let (u, pos) = varint32(data, pos)?;
    if u & 1 == 0 {
        Ok(pos + (u >> 1))
    } else if u == 1 {
        Ok(pos)
    } else {
        Err(fault(index, format!("{what} length {}", zigzag(u))))
    }
}

/// Past the headers at `pos`, and whether one of them is named `marker` (never when
/// `marker` is empty).
fn scan_headers(
    data: &[u8],
    mut pos: u64,
    stop: u64,
    index: u64,
    marker: &[u8],
) -> Result<(u64, bool), Stop> {
    let mut marked = false;
    let u = byte(data, pos)?;
    let u = if u < 0x80 {
        pos += 1;
        u
    } else {
        let (u, at) = uvarint32(data, pos)?;
        pos = at;
        u
    };
    let count = zigzag(u);
    let room = (stop as i64 - pos as i64).div_euclid(2);
    if !(0..=room).contains(&count) {
        let left = stop as i64 - pos as i64;
        return Err(fault(index, format!("header count {count}, {left} bytes left")));
    }
    for _ in 0..count {
        let u = byte(data, pos)?;
        let u = if u < 0x80 {
            pos += 1;
            u
        } else {
            let (u, at) = uvarint32(data, pos)?;
            pos = at;
            u
        };
        if u & 1 == 1 {
            return Err(fault(index, format!("header key length {}", zigzag(u))));
        }
        let key = slice(data, pos, u >> 1); // cut at the end of the data, as Python slices
        if std::str::from_utf8(key).is_err() {
            return Err(fault(index, "a header key that is not UTF-8".to_string()));
        }
        marked |= !marker.is_empty() && key == marker;
        pos += u >> 1;
        let u = byte(data, pos)?;
        let u = if u < 0x80 {
            pos += 1;
            u
        } else {
            let (u, at) = uvarint32(data, pos)?;
            pos = at;
            u
        };
        if u & 1 == 0 {
            pos += u >> 1;
        } else if u != 1 {
            return Err(fault(index, format!("header value length {}", zigzag(u))));
        }
    }
    Ok((pos, marked))
}

fn slice(data: &[u8], pos: u64, len: u64) -> &[u8] {
    let size = data.len() as u64;
    let start = pos.min(size) as usize;
    let stop = pos.saturating_add(len).min(size) as usize;
    &data[start..stop]
}

/// Walk the records in `data[pos:end]` as `validation._scan` does.
///
/// Returns `(True, count, lowest, highest timestamp delta, records with a header named
/// marker)`, or `(False, record index, reason, offset delta or None)` for the first bad
/// record.
#[pyfunction]
#[pyo3(signature = (data, pos, end, marker=None))]
#[allow(deprecated)] // into_py: the tuple conversion of pyo3 0.23
fn scan_records(
    py: Python<'_>,
    data: &Bound<'_, PyBytes>,
    pos: u64,
    end: u64,
    marker: Option<&Bound<'_, PyBytes>>,
) -> PyObject {
    let bytes = data.as_bytes();
    let marker = marker.map_or(&[][..], |m| m.as_bytes());
    let outcome = py.allow_threads(|| scan(bytes, pos, end, marker));
    match outcome {
        Ok(done) => (true, done.count, done.low, done.high, done.marked).into_py(py),
        Err(fault) => (false, fault.index, fault.reason, fault.delta).into_py(py),
    }
}


#[pymodule]
fn meridian_codec(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(scan_records, m)?)?;
    m.add_function(wrap_pyfunction!(decode::decode_records, m)?)?;
    m.add_class::<columns::ColumnBuilder>()?;
    m.add_class::<columns::Buffer>()?;
    m.add_function(wrap_pyfunction!(copy::copy_records, m)?)?;
    encode::register(m)?;
    Ok(())
}
