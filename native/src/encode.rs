//! Compiled record encoder: `dataplane.records.builder._encode_records` and
//! `_records_size` compiled.
//!
//! `encode_records` appends many records to a batch's record block in one call, writing
//! the bytes `builder.encode_record` writes (zigzag varints, offset deltas counting on
//! from the batch's, timestamp deltas from its base). `records_size` checks every record
//! of a call before any is queued and sizes them. The Python functions stay the
//! reference; `tests/dataplane/records/test_compiled_encode.py` compares each pair.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyMapping, PyMemoryView, PyString, PyTuple};

/// The zigzag LEB128 varint of `n`.
fn varint(out: &mut Vec<u8>, n: i64) {
    let mut u = ((n << 1) ^ (n >> 63)) as u64;
    while u > 0x7F {
        out.push((u & 0x7F) as u8 | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

fn varint_len(n: i64) -> usize {
    let u = ((n << 1) ^ (n >> 63)) as u64;
    (64 - u.max(1).leading_zeros() as usize).div_ceil(7)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_string())
}

/// `builder.as_bytes`: bytes as they are, bytearray and memoryview copied, else TypeError.
fn as_bytes<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Bound<'py, PyBytes>> {
    if let Ok(b) = obj.downcast::<PyBytes>() {
        return Ok(b.clone());
    }
    if obj.is_instance_of::<PyByteArray>() || obj.is_instance_of::<PyMemoryView>() {
        return Ok(obj.py().get_type::<PyBytes>().call1((obj,))?.downcast_into::<PyBytes>()?);
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes (or None), not {}",
        type_name(obj)
    )))
}

fn nullable<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Option<Bound<'py, PyBytes>>> {
    if obj.is_none() {
        Ok(None)
    } else {
        as_bytes(obj, what).map(Some)
    }
}

/// `builder.encode_headers`: the header count and headers of one record.
fn encode_headers(headers: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let items: Vec<Bound<'_, PyAny>> = if let Ok(d) = headers.downcast::<PyDict>() {
        d.items().iter().collect()
    } else if let Ok(m) = headers.downcast::<PyMapping>() {
        m.items()?.iter().collect()
    } else {
        headers.try_iter()?.collect::<PyResult<_>>()?
    };
    let mut out = Vec::new();
    varint(&mut out, items.len() as i64);
    for item in items {
        let pair = match item.downcast::<PyTuple>() {
            Ok(t) => t.clone(),
            Err(_) => PyTuple::new(item.py(), item.try_iter()?.collect::<PyResult<Vec<_>>>()?)?,
        };
        if pair.len() != 2 {
            let n = pair.len();
            return Err(PyValueError::new_err(format!(
                "a header is a (key, value) pair, not {n} items"
            )));
        }
        let (key, value) = (pair.get_item(0)?, pair.get_item(1)?);
        let key = key.downcast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!("a header key must be a str, not {}", type_name(&key)))
        })?;
        let encoded = key.to_str()?.as_bytes();
        varint(&mut out, encoded.len() as i64);
        out.extend_from_slice(encoded);
        match nullable(&value, "a header value")? {
            None => out.push(1),
            Some(v) => {
                varint(&mut out, v.as_bytes().len() as i64);
                out.extend_from_slice(v.as_bytes());
            }
        }
    }
    Ok(out)
}

/// The last headers object of a call and its encoding: a call's records often share one
/// (a lane's `x-lane` header), and iterating it again would cost more than the rest of
/// the record. Only exact dicts, lists and tuples are remembered: reading them runs no
/// Python code, so they cannot change during the call.
type HeaderCache = Option<(usize, Vec<u8>)>;

fn cached_headers(h: &Bound<'_, PyAny>, cache: &mut HeaderCache) -> PyResult<Vec<u8>> {
    let plain = h.is_exact_instance_of::<PyDict>()
        || h.is_exact_instance_of::<PyList>()
        || h.is_exact_instance_of::<PyTuple>();
    let id = h.as_ptr() as usize;
    if plain {
        if let Some((last, encoded)) = cache.as_ref() {
            if *last == id {
                return Ok(encoded.clone());
            }
        }
    }
    let encoded = encode_headers(h)?;
    if plain {
        *cache = Some((id, encoded.clone()));
    }
    Ok(encoded)
}

/// One record of a call: a value (bytes or None), or `(key, value[, headers[, timestamp]])`.
struct Item<'py> {
    key: Option<Bound<'py, PyBytes>>,
    value: Option<Bound<'py, PyBytes>>,
    headers: Option<Vec<u8>>,
    timestamp: Option<i64>,
}

impl Item<'_> {
    /// All but the length prefix and the two deltas (`accumulator.append`'s `fixed`).
    fn fixed(&self) -> usize {
        let part = |b: &Option<Bound<'_, PyBytes>>| match b {
            None => 1,
            Some(b) => varint_len(b.as_bytes().len() as i64) + b.as_bytes().len(),
        };
        1 + part(&self.key) + part(&self.value) + self.headers.as_ref().map_or(1, Vec::len)
    }
}

fn parse<'py>(item: &Bound<'py, PyAny>, cache: &mut HeaderCache) -> PyResult<Item<'py>> {
    let Ok(tuple) = item.downcast::<PyTuple>() else {
        let value = nullable(item, "value").map_err(|_| {
            PyTypeError::new_err(format!(
                "a record must be a value (bytes or None) or a (key, value[, headers[, \
                 timestamp_ms]]) tuple, not {}",
                type_name(item)
            ))
        })?;
        return Ok(Item { key: None, value, headers: None, timestamp: None });
    };
    let n = tuple.len();
    if !(2..=4).contains(&n) {
        return Err(PyTypeError::new_err(format!(
            "a record tuple is (key, value[, headers[, timestamp_ms]]), not {n} items"
        )));
    }
    let key = nullable(&tuple.get_item(0)?, "key")?;
    let value = nullable(&tuple.get_item(1)?, "value")?;
    let mut headers = None;
    if n > 2 {
        let h = tuple.get_item(2)?;
        if !h.is_none() && h.is_truthy()? {
            // A call's records are read twice (sized, then encoded): a one-shot iterator
            // of headers would be empty the second time.
            if !(h.is_instance_of::<PyList>()
                || h.is_instance_of::<PyTuple>()
                || h.downcast::<PyMapping>().is_ok())
            {
                return Err(PyTypeError::new_err(format!(
                    "a record's headers are a mapping, list or tuple, not {}",
                    h.get_type().name()?
                )));
            }
            headers = Some(cached_headers(&h, cache)?);
        }
    }
    let mut timestamp = None;
    if n > 3 {
        let t = tuple.get_item(3)?;
        if !t.is_none() {
            if t.is_instance_of::<pyo3::types::PyBool>() || !t.is_instance_of::<pyo3::types::PyInt>() {
                return Err(PyTypeError::new_err(format!(
                    "timestamp_ms must be an int, not {}",
                    type_name(&t)
                )));
            }
            let ts = t.extract::<i64>().map_err(|_| {
                PyValueError::new_err(format!("timestamp_ms {t} does not fit int64"))
            })?;
            timestamp = Some(ts);
        }
    }
    Ok(Item { key, value, headers, timestamp })
}

/// Gives a record without headers of its own the call's shared header block.
fn share(item: &mut Item<'_>, shared_headers: Option<&[u8]>) {
    if item.headers.is_none() {
        if let Some(shared) = shared_headers {
            item.headers = Some(shared.to_vec());
        }
    }
}

fn with_index<T>(index: usize, result: PyResult<T>) -> PyResult<T> {
    result.map_err(|err| {
        Python::with_gil(|py| {
            let message = format!("record {index}: {}", err.value(py));
            if err.is_instance_of::<PyTypeError>(py) {
                PyTypeError::new_err(message)
            } else {
                PyValueError::new_err(message)
            }
        })
    })
}

fn item_at<'py>(records: &Bound<'py, PyAny>, index: usize) -> PyResult<Bound<'py, PyAny>> {
    match records.downcast::<PyList>() {
        Ok(list) => list.get_item(index),
        Err(_) => records.downcast::<PyTuple>()?.get_item(index),
    }
}

fn length(records: &Bound<'_, PyAny>) -> PyResult<usize> {
    match records.downcast::<PyList>() {
        Ok(list) => Ok(list.len()),
        Err(_) => Ok(records.downcast::<PyTuple>()?.len()),
    }
}

/// `builder._records_size` compiled: `(total, largest, earliest, keyed)` of `records` (a
/// list or tuple): the bytes they take but length prefixes and deltas, the largest such
/// record, the smallest explicit timestamp (None if none has one), how many have a key.
/// Raises `TypeError` or `ValueError` prefixed with the index of the first bad record.
/// `shared_headers` (an encoded header block) stands for the headers of every record
/// without its own.
#[pyfunction]
#[pyo3(signature = (records, shared_headers=None))]
fn records_size(
    records: &Bound<'_, PyAny>,
    shared_headers: Option<&[u8]>,
) -> PyResult<(usize, usize, Option<i64>, usize)> {
    let (mut total, mut largest, mut earliest, mut keyed) = (0usize, 0usize, None::<i64>, 0);
    let mut cache: HeaderCache = None;
    for index in 0..length(records)? {
        let mut item = with_index(index, parse(&item_at(records, index)?, &mut cache))?;
        share(&mut item, shared_headers);
        let fixed = item.fixed();
        total += fixed;
        largest = largest.max(fixed);
        if let Some(t) = item.timestamp {
            earliest = Some(earliest.map_or(t, |e: i64| e.min(t)));
        }
        keyed += usize::from(item.key.is_some());
    }
    Ok((total, largest, earliest, keyed))
}

/// `builder._encode_records` compiled: appends `records[start:]` to `out` as records of a
/// batch holding `offset_delta` records so far, based at `base_timestamp` (None while
/// empty: the first record's), records without a timestamp taking `now`; stops before a
/// record that would take `out` past `room` more bytes (the first record of an empty
/// batch always goes in). Returns `(next index, base timestamp, max timestamp of those
/// written or None, bytes written)`.
/// A record without headers takes `shared_headers` (an encoded header block) if given.
#[pyfunction]
#[pyo3(signature = (out, records, start, offset_delta, base_timestamp, now, room, shared_headers=None))]
#[allow(clippy::too_many_arguments)]
fn encode_records(
    out: &Bound<'_, PyByteArray>,
    records: &Bound<'_, PyAny>,
    start: usize,
    offset_delta: i64,
    base_timestamp: Option<i64>,
    now: i64,
    room: usize,
    shared_headers: Option<&[u8]>,
) -> PyResult<(usize, Option<i64>, Option<i64>, usize)> {
    let n = length(records)?;
    let mut buf: Vec<u8> = Vec::new();
    let (mut index, mut delta, mut base, mut max) = (start, offset_delta, base_timestamp, None);
    let mut cache: HeaderCache = None;
    while index < n {
        let mut item = with_index(index, parse(&item_at(records, index)?, &mut cache))?;
        share(&mut item, shared_headers);
        let timestamp = item.timestamp.unwrap_or(now);
        let first = base.unwrap_or(timestamp);
        let ts_delta = timestamp.checked_sub(first).ok_or_else(|| {
            PyValueError::new_err(format!("record {index}: timestamp delta past int64"))
        })?;
        let body = item.fixed() + varint_len(ts_delta) + varint_len(delta);
        let size = body + varint_len(body as i64);
        if delta > 0 && buf.len() + size > room {
            break;
        }
        write(&mut buf, &item, body, ts_delta, delta);
        base = Some(first);
        max = Some(max.map_or(timestamp, |m: i64| m.max(timestamp)));
        index += 1;
        delta += 1;
    }
    let old = out.len();
    out.resize(old + buf.len())?;
    // SAFETY: the GIL is held and no Python code runs while this slice lives.
    unsafe { out.as_bytes_mut()[old..].copy_from_slice(&buf) };
    Ok((index, base, max, buf.len()))
}

fn write(buf: &mut Vec<u8>, item: &Item<'_>, body: usize, ts_delta: i64, delta: i64) {
    varint(buf, body as i64);
    buf.push(0); // record attributes: none defined
    varint(buf, ts_delta);
    varint(buf, delta);
    for part in [&item.key, &item.value] {
        match part {
            None => buf.push(1),
            Some(b) => {
                varint(buf, b.as_bytes().len() as i64);
                buf.extend_from_slice(b.as_bytes());
            }
        }
    }
    match &item.headers {
        None => buf.push(0),
        Some(h) => buf.extend_from_slice(h),
    }
}

/// Adds the encoder's functions to the `meridian_codec` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_records, m)?)?;
    m.add_function(wrap_pyfunction!(records_size, m)?)?;
    Ok(())
}
