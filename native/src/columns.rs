//! `dataplane.records.columns.ColumnsReference` compiled: the records of checked,
//! decompressed batches appended to columns in Arrow's buffer layout (offsets, timestamps,
//! keys, values, headers as a list of key/value entries). The same columns and the same
//! errors with the same messages as the Python builder, its reference; the tests compare
//! the two on random, damaged and crafted batches.
//!
//! Each record is read by `decode.rs`'s loop (`Batch::record`, `decoder._decode`
//! compiled), its header block as `decoder.read_headers` reads it: no Python object is
//! made per record, which is what a record costs in the `Record` decoders.

use std::ffi::{c_int, c_void};
use std::ptr;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::decode::{cut, quick, signed, Bad, Batch, Field, Fields, Step};

/// What an Arrow binary or string column (32-bit offsets) holds at most.
const MAX_COLUMN_BYTES: usize = i32::MAX as usize;

/// Bytes handed to Python without a copy: a read-only buffer (the buffer protocol) over
/// memory the builder wrote, which lives as long as anything (an Arrow array) holds it.
#[pyclass(module = "meridian_codec", frozen)]
pub struct Buffer {
    data: Vec<u8>,
}

#[pymethods]
impl Buffer {
    /// SAFETY (for the caller, CPython): `view` is a Py_buffer to fill. The data never
    /// changes (the class is frozen and nothing mutates `data`), and `view.obj` holds a
    /// reference to `self`, so the pointer stays valid until the view is released.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no view to fill"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("the buffer is read-only"));
        }
        let data = &slf.get().data;
        (*view).buf = data.as_ptr() as *mut c_void;
        (*view).len = data.len() as ffi::Py_ssize_t;
        (*view).readonly = 1;
        (*view).itemsize = 1;
        (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
            c"B".as_ptr() as *mut _
        } else {
            ptr::null_mut()
        };
        (*view).ndim = 1;
        (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
            &mut (*view).len
        } else {
            ptr::null_mut()
        };
        (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
            &mut (*view).itemsize
        } else {
            ptr::null_mut()
        };
        (*view).suboffsets = ptr::null_mut();
        (*view).internal = ptr::null_mut();
        (*view).obj = slf.into_any().into_ptr();
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}

    fn __len__(&self) -> usize {
        self.data.len()
    }
}

fn buffer(py: Python<'_>, data: Vec<u8>) -> PyResult<PyObject> {
    Ok(Bound::new(py, Buffer { data })?.into_any().unbind())
}

/// One binary column: 32-bit offsets (from 0), the bytes, and a validity bitmap.
struct Binary {
    offsets: Vec<u8>,
    data: Vec<u8>,
    validity: Vec<u8>,
    len: usize,
    nulls: usize,
}

impl Binary {
    /// Room for `items` entries of `bytes` bytes in all, so the column rarely moves.
    fn with_capacity(items: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(4 * (items + 1));
        offsets.extend_from_slice(&0i32.to_ne_bytes());
        Binary {
            offsets,
            data: Vec::with_capacity(bytes),
            validity: Vec::with_capacity(items.div_ceil(8)),
            len: 0,
            nulls: 0,
        }
    }

    /// Whether `extra` more bytes (and `items` more entries) keep it within Arrow's bounds.
    fn fits(&self, extra: usize, items: usize) -> bool {
        self.data.len() + extra <= MAX_COLUMN_BYTES && self.len + items < MAX_COLUMN_BYTES
    }

    fn push(&mut self, item: Option<&[u8]>) {
        if self.len.is_multiple_of(8) {
            self.validity.push(0);
        }
        match item {
            Some(bytes) => {
                self.data.extend_from_slice(bytes);
                self.validity[self.len / 8] |= 1 << (self.len % 8);
            }
            None => self.nulls += 1,
        }
        // Within i32 by `fits`, checked before every record is appended.
        self.offsets.extend_from_slice(&(self.data.len() as i32).to_ne_bytes());
        self.len += 1;
    }

    /// `(offsets, data, validity or None when nothing is null, null count)`, handed
    /// over as `Buffer`s.
    fn into_py(self, py: Python<'_>) -> PyResult<PyObject> {
        let validity = if self.nulls == 0 {
            py.None()
        } else {
            buffer(py, self.validity)?
        };
        let parts = [
            buffer(py, self.offsets)?,
            buffer(py, self.data)?,
            validity,
            self.nulls.into_pyobject(py)?.into_any().unbind(),
        ];
        Ok(PyTuple::new(py, parts)?.into_any().unbind())
    }
}

/// One header of a block: its key's `(start, length)` and its value.
struct Entry {
    key: (u128, u128),
    value: Field,
}

/// The header block `data[pos:stop]` as `decoder.decode_headers` reads it (its count
/// first, then the headers, which must fill it), into `entries`. `Bad::Value` carries
/// `decode_headers`'s `ValueError` message, `Bad::Raised` the `UnicodeDecodeError` of a
/// key that is not UTF-8, `Bad::Index` a read past the end of the data.
fn read_headers(
    py: Python<'_>,
    data: &[u8],
    pos: u128,
    stop: u128,
    entries: &mut Vec<Entry>,
) -> Result<(), Bad> {
    entries.clear();
    let (u, mut pos) = quick(data, pos)?;
    let count = signed(u);
    let room = (stop as i128 - pos as i128).div_euclid(2);
    if count < 0 || count > room {
        return Err(Bad::Value(format!("invalid header count {count}")));
    }
    for _ in 0..count {
        let (u, at_) = quick(data, pos)?;
        pos = at_;
        if u & 1 == 1 {
            return Err(Bad::Value(if u == 1 {
                "null header key".to_string()
            } else {
                format!("invalid length {}", signed(u))
            }));
        }
        let key = cut(data, pos, u >> 1);
        if std::str::from_utf8(key).is_err() {
            // Python's own message, as the reference raises it.
            let err = PyBytes::new(py, key).call_method0("decode").err();
            return Err(err.map_or(Bad::Value("invalid UTF-8".to_string()), Bad::Raised));
        }
        let key = (pos, u >> 1);
        pos += u >> 1;
        let (u, at_) = quick(data, pos)?;
        pos = at_;
        let value = if u & 1 == 0 {
            pos += u >> 1;
            Some((at_, u >> 1))
        } else if u == 1 {
            None
        } else {
            return Err(Bad::Value(format!("invalid length {}", signed(u))));
        };
        entries.push(Entry { key, value });
    }
    if pos != stop {
        return Err(Bad::Value("headers do not fill the record".to_string()));
    }
    Ok(())
}

/// Columns of records appended batch by batch (`add`), handed over by `finish`.
#[pyclass(module = "meridian_codec")]
pub struct ColumnBuilder {
    count: usize,
    offsets: Vec<u8>,
    timestamps: Vec<u8>,
    keys: Binary,
    values: Binary,
    header_offsets: Vec<u8>,
    header_keys: Binary,
    header_values: Binary,
    pick: Option<Vec<u8>>,
    picked: Binary,
    entries: Vec<Entry>,
}

/// A record's fields as slices of the batch.
fn field(data: &[u8], range: Field) -> Option<&[u8]> {
    range.map(|(start, len)| cut(data, start, len))
}

impl ColumnBuilder {
    /// Append the record just read (its headers in `self.entries`), or say why it does not
    /// fit the columns (the reference's message; nothing is appended then).
    fn append(&mut self, data: &[u8], fields: &Fields, timestamp: i128) -> Option<String> {
        let offset = fields.offset;
        let Ok(offset) = i64::try_from(offset) else {
            return Some(format!("the record at offset {offset} has an offset past int64"));
        };
        let Ok(timestamp) = i64::try_from(timestamp) else {
            return Some(format!(
                "the record at offset {offset} has timestamp {timestamp} past int64"
            ));
        };
        let key = field(data, fields.key);
        let value = field(data, fields.value);
        let mut names = 0usize;
        let mut contents = 0usize;
        let mut last: Option<&[u8]> = None;
        for entry in &self.entries {
            let name = cut(data, entry.key.0, entry.key.1);
            let content = field(data, entry.value);
            names += name.len();
            contents += content.map_or(0, <[u8]>::len);
            if self.pick.as_deref() == Some(name) {
                last = Some(content.unwrap_or(b""));
            }
        }
        let items = self.entries.len();
        let fits = self.keys.fits(key.map_or(0, <[u8]>::len), 1)
            && self.values.fits(value.map_or(0, <[u8]>::len), 1)
            && self.header_keys.fits(names, items)
            && self.header_values.fits(contents, items)
            && self.picked.fits(last.map_or(0, <[u8]>::len), 1);
        if !fits {
            return Some(format!("the record at offset {offset} takes a column past 2 GiB"));
        }
        self.offsets.extend_from_slice(&offset.to_ne_bytes());
        self.timestamps.extend_from_slice(&timestamp.to_ne_bytes());
        self.keys.push(key);
        self.values.push(value);
        for entry in &self.entries {
            self.header_keys.push(Some(cut(data, entry.key.0, entry.key.1)));
            self.header_values.push(field(data, entry.value));
        }
        let entries = self.header_keys.len as i32; // within i32 by `fits`
        self.header_offsets.extend_from_slice(&entries.to_ne_bytes());
        if self.pick.is_some() {
            self.picked.push(last);
        }
        self.count += 1;
        None
    }
}

#[pymethods]
impl ColumnBuilder {
    /// `pick_header`: the header whose last value per record `picked` holds. `records`
    /// and `bytes`: about how many records and key and value bytes will come (room is
    /// made for them at once: memory touched the first time is what copying costs).
    #[new]
    #[pyo3(signature = (pick_header=None, records=0, bytes=0))]
    fn new(pick_header: Option<&str>, records: usize, bytes: usize) -> Self {
        let records = records.min(MAX_COLUMN_BYTES / 16);
        let bytes = bytes.min(MAX_COLUMN_BYTES);
        let mut header_offsets = Vec::with_capacity(4 * (records + 1));
        header_offsets.extend_from_slice(&0i32.to_ne_bytes());
        ColumnBuilder {
            count: 0,
            offsets: Vec::with_capacity(8 * records),
            timestamps: Vec::with_capacity(8 * records),
            keys: Binary::with_capacity(records, 16 * records),
            values: Binary::with_capacity(records, bytes),
            header_offsets,
            header_keys: Binary::with_capacity(0, 0),
            header_values: Binary::with_capacity(0, 0),
            pick: pick_header.map(|name| name.as_bytes().to_vec()),
            picked: Binary::with_capacity(if pick_header.is_some() { records } else { 0 }, 0),
            entries: Vec::new(),
        }
    }

    /// The records of `data[start:stop]` (one batch's, decompressed) at offsets in
    /// `[low, high)` appended; `stamp`, when given, is every record's timestamp (a
    /// log-append-time batch). Returns how many records the batch holds (those outside
    /// the range read and counted, not appended); raises `ValueError` with the reference's
    /// message at the first bad record.
    #[pyo3(signature = (data, start, stop, base_offset, base_timestamp, stamp, low, high))]
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        start: usize,
        stop: usize,
        base_offset: i64,
        base_timestamp: i64,
        stamp: Option<i64>,
        low: i128,
        high: i128,
    ) -> PyResult<usize> {
        let buffer = PyBuffer::<u8>::get(data)?;
        if !buffer.is_c_contiguous() || start > stop || stop > buffer.len_bytes() {
            return Err(PyValueError::new_err("the records are not in the buffer"));
        }
        // SAFETY: a contiguous buffer of `len_bytes` bytes, held (and its exporter kept
        // alive) by `buffer` until the end of this call; the GIL is held throughout, so
        // no Python code runs that could resize it.
        let whole = unsafe {
            std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes())
        };
        let data = &whole[start..stop];
        let batch = Batch {
            data,
            end: data.len() as u128,
            base_offset: i128::from(base_offset),
            base_timestamp: i128::from(base_timestamp),
            min_offset: low,
            dense: false,
        };
        let mut pos = 0u128;
        let mut n = 0usize;
        let mut offset = batch.base_offset - 1;
        let mut refused: Option<String> = None; // the reference raises it after the loop
        while pos < batch.end {
            match self.step(py, &batch, pos, n, &mut offset) {
                Ok(Step::Skip(stop)) => pos = stop,
                Ok(Step::Take(fields)) => {
                    if refused.is_none() && fields.offset < high {
                        let timestamp = stamp.map_or(fields.timestamp, i128::from);
                        refused = self.append(data, &fields, timestamp);
                    }
                    pos = fields.stop;
                }
                Err(Bad::Value(message)) => return Err(PyValueError::new_err(message)),
                Err(Bad::Raised(err)) => {
                    let message = format!("record {n}'s headers: {}", err.value(py));
                    return Err(PyValueError::new_err(message));
                }
                Err(Bad::Index) => {
                    let message = format!("record {n} runs past the end of the batch");
                    return Err(PyValueError::new_err(message));
                }
            }
            n += 1;
        }
        match refused {
            Some(message) => Err(PyValueError::new_err(message)),
            None => Ok(n),
        }
    }

    /// `(count, offsets, timestamps, keys, values, header offsets, header keys, header
    /// values, picked or None)`, each binary column as `Binary::into_py` gives it, every
    /// buffer a `Buffer`; the builder is empty again after.
    fn finish(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        let done = std::mem::replace(self, ColumnBuilder::new(None, 0, 0));
        self.pick.clone_from(&done.pick);
        let picked = match done.pick {
            Some(_) => done.picked.into_py(py)?,
            None => py.None(),
        };
        let parts = [
            done.count.into_pyobject(py)?.into_any().unbind(),
            buffer(py, done.offsets)?,
            buffer(py, done.timestamps)?,
            done.keys.into_py(py)?,
            done.values.into_py(py)?,
            buffer(py, done.header_offsets)?,
            done.header_keys.into_py(py)?,
            done.header_values.into_py(py)?,
            picked,
        ];
        Ok(PyTuple::new(py, parts)?.into_any().unbind())
    }
}

impl ColumnBuilder {
    /// The record at `pos` (the `n`th of its batch), its header block read into
    /// `self.entries`; a header fault as `Bad`, renamed by `add` as the reference does.
    fn step(
        &mut self,
        py: Python<'_>,
        batch: &Batch<'_>,
        pos: u128,
        n: usize,
        offset: &mut i128,
    ) -> Result<Step, Bad> {
        let step = batch.record(pos, n, offset)?;
        if let Step::Take(fields) = &step {
            match fields.headers {
                Some((start, stop)) => {
                    read_headers(py, batch.data, start, stop, &mut self.entries).map_err(
                        |bad| match bad {
                            Bad::Value(message) => {
                                Bad::Value(format!("record {n}'s headers: {message}"))
                            }
                            other => other,
                        },
                    )?;
                }
                None => self.entries.clear(),
            }
        }
        Ok(step)
    }
}
