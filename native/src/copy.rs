//! `dataplane.records.copying._copy_records` compiled: a fetched batch's records
//! re-encoded into a batch being built, provenance headers appended on a record's first
//! hop and records that already carry an origin left out, with no Python object per record. The same
//! bytes, return values and messages as the Python function, its reference;
//! `tests/dataplane/records/test_compiled_copy.py` compares the two.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};

use crate::decode::{at, cut, quick, signed, Bad};

fn varint(out: &mut Vec<u8>, n: i128) {
    let mut u = ((n << 1) ^ (n >> 127)) as u128;
    while u > 0x7F {
        out.push((u & 0x7F) as u8 | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

fn varint_len(n: i128) -> usize {
    let u = ((n << 1) ^ (n >> 127)) as u128;
    (128 - u.max(1).leading_zeros() as usize).div_ceil(7)
}

/// `_uvarint`: a raw varint at `pos`, past the end of the data an `IndexError`.
fn uv(data: &[u8], pos: u128) -> Result<(u128, u128), Bad> {
    quick(data, pos)
}

fn nullable(data: &[u8], pos: u128, n: usize, what: &str) -> Result<(Option<(u128, u128)>, u128), Bad> {
    if at(data, pos)? == 1 {
        return Ok((None, pos + 1));
    }
    let (u, pos) = uv(data, pos)?;
    if u & 1 == 1 {
        return Err(Bad::Value(format!("record {n} has {what} length {}", signed(u))));
    }
    Ok((Some((pos, u >> 1)), pos + (u >> 1)))
}

/// `_origin`: the header count of `data[pos:stop]` and whether its last `key` header
/// has a value (Some(())) or is absent or null (None).
fn origin(
    data: &[u8],
    mut pos: u128,
    stop: u128,
    key: &[u8],
    n: usize,
) -> Result<(i128, Option<()>), Bad> {
    let bad = || Bad::Value(format!("record {n} has bad headers"));
    let (u, at_) = uv(data, pos)?;
    pos = at_;
    let count = signed(u);
    if count < 0 || count > (stop as i128 - pos as i128) >> 1 {  // floor division by 2
        return Err(bad());
    }
    let mut found = None;
    for _ in 0..count {
        let (u, at_) = uv(data, pos)?;
        pos = at_;
        if u & 1 == 1 || pos + (u >> 1) > stop {
            return Err(bad());
        }
        let name = cut(data, pos, u >> 1);
        if std::str::from_utf8(name).is_err() {
            return Err(bad());
        }
        pos += u >> 1;
        let (u, at_) = uv(data, pos)?;
        pos = at_;
        let mut value = None;
        if u & 1 == 0 {
            value = Some(cut(data, pos, u >> 1));
            pos += u >> 1;
        } else if u != 1 {
            return Err(bad());
        }
        if pos > stop {
            return Err(bad());
        }
        if name == key {
            found = value.map(|_| ());
        }
    }
    if pos != stop {
        return Err(bad());
    }
    Ok((count, found))
}

fn field_len(data: &[u8], field: Option<(u128, u128)>) -> usize {
    field.map_or(1, |(start, len)| {
        let len = cut(data, start, len).len();
        varint_len(len as i128) + len
    })
}

fn write_field(buf: &mut Vec<u8>, data: &[u8], field: Option<(u128, u128)>) {
    match field {
        None => buf.push(1),
        Some((start, len)) => {
            let bytes = cut(data, start, len);
            varint(buf, bytes.len() as i128);
            buf.extend_from_slice(bytes);
        }
    }
}

/// `offset` in decimal ASCII, written at the end of `buf` (no 128-bit division when it
/// fits 64 bits, as every offset does).
fn decimal(offset: i128, buf: &mut [u8; 40]) -> &[u8] {
    let negative = offset < 0;
    let mut at = buf.len();
    if let Ok(mut u) = u64::try_from(offset.unsigned_abs()) {
        loop {
            at -= 1;
            buf[at] = b'0' + (u % 10) as u8;
            u /= 10;
            if u == 0 {
                break;
            }
        }
    } else {
        let mut u = offset.unsigned_abs();
        loop {
            at -= 1;
            buf[at] = b'0' + (u % 10) as u8;
            u /= 10;
            if u == 0 {
                break;
            }
        }
    }
    if negative {
        at -= 1;
        buf[at] = b'-';
    }
    &buf[at..]
}

fn header_len(key: &[u8], value: &[u8]) -> usize {
    varint_len(key.len() as i128) + key.len() + varint_len(value.len() as i128) + value.len()
}

fn write_header(buf: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    varint(buf, key.len() as i128);
    buf.extend_from_slice(key);
    varint(buf, value.len() as i128);
    buf.extend_from_slice(value);
}

/// What a call is given besides the data and positions.
struct Rule<'a> {
    origin_key: &'a [u8],
    origin: &'a [u8],
    offset_key: &'a [u8],
}

/// What a call returns (`CopyResult` of the reference).
#[derive(Default)]
struct Done {
    pos: u128,
    copied: usize,
    base: Option<i128>,
    highest: Option<i128>,
    written: usize,
    dropped: usize,
    last: i128,
    payload: usize,
}

#[allow(clippy::too_many_arguments)]
fn copy(
    mut buf: Option<&mut Vec<u8>>,
    data: &[u8],
    mut pos: u128,
    end: u128,
    base_offset: i128,
    base_timestamp: i128,
    min_offset: i128,
    offset_delta: i128,
    out_base: Option<i128>,
    room: usize,
    rule: &Rule<'_>,
    n: &mut usize,
) -> Result<Done, Bad> {
    let mut done = Done { base: out_base, last: -1, ..Done::default() };
    let mut delta = offset_delta;
    while pos < end {
        let (u, at_) = uv(data, pos)?;
        let stop = at_ + (u >> 1);
        if u & 1 == 1 || stop > end || stop < at_ + 6 {
            return Err(Bad::Value(format!("record {n} has a bad length")));
        }
        let (u, at_) = uv(data, at_ + 1)?; // data[at_]: the record attributes
        let timestamp = base_timestamp + signed(u);
        let (u, at_) = uv(data, at_)?;
        if u & 1 == 1 {
            return Err(Bad::Value(format!("record {n} has a negative offset delta")));
        }
        let offset = base_offset + (u >> 1) as i128;
        if offset < min_offset {
            pos = stop;
            *n += 1;
            continue;
        }
        let (key, at_) = nullable(data, at_, *n, "key")?;
        let (value, at_) = nullable(data, at_, *n, "value")?;
        if at(data, at_)? == 0 && at_ + 1 != stop {
            return Err(Bad::Value(format!("record {n}'s fields do not fill its length")));
        }
        let (count, found) = origin(data, at_, stop, rule.origin_key, *n)?;
        if found.is_some() {
            pos = stop;
            *n += 1;
            done.dropped += 1;
            continue;
        }
        let mut digits_buf = [0u8; 40];
        let digits = decimal(offset, &mut digits_buf);
        let (rest, headers) = {
            let (_, first) = uv(data, at_)?;
            let rest = cut(data, first, stop - first);
            let size = varint_len(count + 2)
                + rest.len()
                + header_len(rule.origin_key, rule.origin)
                + header_len(rule.offset_key, digits);
            (rest, size)
        };
        let start = done.base.unwrap_or(timestamp);
        let ts_delta = timestamp - start;
        if !(-(1i128 << 63)..(1i128 << 63)).contains(&ts_delta) {
            return Err(Bad::Value(format!("record {n}: timestamp delta past int64")));
        }
        let body = 1
            + varint_len(ts_delta)
            + varint_len(delta)
            + field_len(data, key)
            + field_len(data, value)
            + headers;
        let size = varint_len(body as i128) + body;
        if delta > 0 && done.written + size > room {
            break;
        }
        if let Some(buf) = buf.as_deref_mut() {
            varint(buf, body as i128);
            buf.push(0); // record attributes: none defined
            varint(buf, ts_delta);
            varint(buf, delta);
            write_field(buf, data, key);
            write_field(buf, data, value);
            varint(buf, count + 2);
            buf.extend_from_slice(rest);
            write_header(buf, rule.origin_key, rule.origin);
            write_header(buf, rule.offset_key, digits);
        }
        done.written += size;
        done.base = Some(start);
        done.highest = Some(done.highest.map_or(timestamp, |h| h.max(timestamp)));
        done.copied += 1;
        done.last = offset;
        done.payload += [key, value]
            .iter()
            .map(|f| f.map_or(0, |(start, len)| cut(data, start, len).len()))
            .sum::<usize>();
        delta += 1;
        pos = stop;
        *n += 1;
    }
    done.pos = pos;
    Ok(done)
}

type Returned = (u128, usize, Option<i128>, Option<i128>, usize, usize, i128, usize);

/// `copying._copy_records` compiled: appends the records of `data[pos:end]` at or after
/// `min_offset` to `out` by the copy rule; returns `(position of the first record not
/// read, records written, base timestamp, max timestamp written or None, bytes written,
/// records dropped, offset of the last record written or -1, key and value bytes)`;
/// `out` None: the records are checked and sized, nothing is written.
#[pyfunction]
#[pyo3(signature = (
    out, data, pos, end, base_offset, base_timestamp, min_offset, offset_delta,
    out_base_timestamp, room, origin_key, origin, offset_key
))]
#[allow(clippy::too_many_arguments)]
pub fn copy_records(
    py: Python<'_>,
    out: Option<&Bound<'_, PyByteArray>>,
    data: &Bound<'_, PyBytes>,
    pos: u64,
    end: u64,
    base_offset: i64,
    base_timestamp: i64,
    min_offset: i128,
    offset_delta: i64,
    out_base_timestamp: Option<i128>,
    room: usize,
    origin_key: &[u8],
    origin: &[u8],
    offset_key: &[u8],
) -> PyResult<Returned> {
    let rule = Rule { origin_key, origin, offset_key };
    let mut buf = Vec::with_capacity(if out.is_some() { room.min(1 << 22) } else { 0 });
    let mut n = 0usize;
    let writing = out.is_some();
    let bytes = data.as_bytes();
    // The loop runs without the GIL (the fetcher and sender threads go on meanwhile):
    // it reads only immutable bytes and writes only its own buffer.
    let outcome = py.allow_threads(|| {
        copy(
            writing.then_some(&mut buf),
            bytes,
            u128::from(pos),
            u128::from(end),
            i128::from(base_offset),
            i128::from(base_timestamp),
            min_offset,
            i128::from(offset_delta),
            out_base_timestamp,
            room,
            &rule,
            &mut n,
        )
    });
    let done = match outcome {
        Ok(done) => done,
        Err(Bad::Value(message)) => return Err(PyValueError::new_err(message)),
        Err(Bad::Raised(err)) => return Err(err),
        Err(Bad::Index) => {
            let message = format!("record {n} runs past the end of the batch");
            return Err(PyValueError::new_err(message));
        }
    };
    if let Some(out) = out {
        let old = out.len();
        out.resize(old + buf.len())?;
        // SAFETY: the GIL is held and no Python code runs while this slice lives.
        unsafe { out.as_bytes_mut()[old..].copy_from_slice(&buf) };
    }
    Ok((
        done.pos,
        done.copied,
        done.base,
        done.highest,
        done.written,
        done.dropped,
        done.last,
        done.payload,
    ))
}
