//! `dataplane.records.decoder._decode` compiled: the one record loop behind the eager
//! decoder (`Record` tuples, headers decoded) and the SDK's lazy one (slotted objects,
//! headers read on first access). The same records, built the same way, and the same
//! errors with the same messages as the Python loop, its reference; the tests compare
//! the two on random, damaged and crafted batches.
//!
//! Records are allocated through their type's `tp_alloc`, as `tuple.__new__` and
//! `object.__new__` do, without a call into Python per record: that call, not the
//! parsing, is what a record costs.

use std::cell::RefCell;

use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple, PyType};

/// Header sets kept per call (the Python loop's `_HEADER_SETS_KEPT`).
const HEADER_SETS_KEPT: usize = 256;

/// Why the loop stopped: a read past the end of the data (Python's `IndexError`), a
/// bad record (a `ValueError` message), or an exception raised by `headers_of`.
pub(crate) enum Bad {
    Index,
    Value(String),
    Raised(PyErr),
}

pub(crate) fn at(data: &[u8], pos: u128) -> Result<u128, Bad> {
    usize::try_from(pos)
        .ok()
        .and_then(|i| data.get(i))
        .map(|b| u128::from(*b))
        .ok_or(Bad::Index)
}

/// Unsigned LEB128 of at most 10 bytes (`varint.read_uvarint`).
fn uvarint(data: &[u8], pos: u128) -> Result<(u128, u128), Bad> {
    let mut result: u128 = 0;
    for index in 0..10u128 {
        let b = at(data, pos + index)?;
        result |= (b & 0x7F) << (7 * index);
        if b < 0x80 {
            return Ok((result, pos + index + 1));
        }
    }
    Err(Bad::Value("varint longer than 10 bytes".to_string()))
}

/// The one- and two-byte forms first, as the Python loop reads them.
pub(crate) fn quick(data: &[u8], pos: u128) -> Result<(u128, u128), Bad> {
    let u = at(data, pos)?;
    if u < 0x80 {
        return Ok((u, pos + 1));
    }
    let b = at(data, pos + 1)?;
    if b < 0x80 {
        return Ok((u - 0x80 + (b << 7), pos + 2));
    }
    uvarint(data, pos)
}

pub(crate) fn signed(u: u128) -> i128 {
    ((u >> 1) as i128) ^ -((u & 1) as i128)
}

/// Python's `data[start:start + len]`: cut at the end of the data.
pub(crate) fn cut(data: &[u8], start: u128, len: u128) -> &[u8] {
    let size = data.len() as u128;
    let from = start.min(size) as usize;
    let to = start.saturating_add(len).min(size) as usize;
    &data[from..to]
}

/// A nullable key or value at `pos`: `(None or its (start, length), position after)`.
pub(crate) type Field = Option<(u128, u128)>;

fn nullable(data: &[u8], pos: u128, n: usize, what: &str) -> Result<(Field, u128), Bad> {
    if at(data, pos)? == 1 {
        return Ok((None, pos + 1));
    }
    let (u, pos) = quick(data, pos)?;
    if u & 1 == 1 {
        return Err(Bad::Value(format!(
            "record {n} has {what} length {}",
            signed(u)
        )));
    }
    Ok((Some((pos, u >> 1)), pos + (u >> 1)))
}

/// One record read: skipped (below `min_offset`) or its fields, and where it stops.
pub(crate) enum Step {
    Skip(u128),
    Take(Fields),
}

pub(crate) struct Fields {
    pub(crate) offset: i128,
    pub(crate) timestamp: i128,
    pub(crate) key: Field,
    pub(crate) value: Field,
    /// The header block's `(start, stop)`, or None for a record without headers.
    pub(crate) headers: Option<(u128, u128)>,
    pub(crate) stop: u128,
}

/// What stays the same for every record of the batch.
pub(crate) struct Batch<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) end: u128,
    pub(crate) base_offset: i128,
    pub(crate) base_timestamp: i128,
    pub(crate) min_offset: i128,
    pub(crate) dense: bool,
}

impl Batch<'_> {
    /// The record at `pos` (the `n`th); `offset` is the previous record's (dense batches).
    pub(crate) fn record(&self, mut pos: u128, n: usize, offset: &mut i128) -> Result<Step, Bad> {
        let data = self.data;
        let (u, at_) = quick(data, pos)?;
        pos = at_;
        let stop = pos + (u >> 1);
        if u & 1 == 1 || stop > self.end || stop < pos + 6 {
            return Err(Bad::Value(format!("record {n} has a bad length")));
        }
        let (u, at_) = quick(data, pos + 1)?; // data[pos]: the record attributes
        let timestamp = self.base_timestamp + signed(u);
        let (u, at_) = quick(data, at_)?;
        pos = at_;
        if self.dense {
            *offset += 1;
        } else if u & 1 == 1 {
            return Err(Bad::Value(format!(
                "record {n} has a negative offset delta"
            )));
        } else {
            *offset = self.base_offset + (u >> 1) as i128;
        }
        if *offset < self.min_offset {
            return Ok(Step::Skip(stop));
        }
        let (key, pos) = nullable(data, pos, n, "key")?;
        let (value, pos) = nullable(data, pos, n, "value")?;
        let headers = if at(data, pos)? != 0 {
            Some((pos, stop))
        } else if pos + 1 == stop {
            None
        } else {
            return Err(Bad::Value(format!(
                "record {n}'s fields do not fill its length"
            )));
        };
        Ok(Step::Take(Fields {
            offset: *offset,
            timestamp,
            key,
            value,
            headers,
            stop,
        }))
    }
}

/// Builds the records: `Record` tuples or slotted objects, as `cls` is a tuple or not.
struct Maker<'py> {
    py: Python<'py>,
    data: &'py Bound<'py, PyBytes>,
    cls: &'py Bound<'py, PyType>,
    eager: bool,
    source: &'py Bound<'py, PyAny>,
    headers_of: &'py Bound<'py, PyAny>,
    header_sets: Option<&'py Bound<'py, PyDict>>,
    empty: Bound<'py, PyTuple>,
    last_timestamp: RefCell<Option<(i128, PyObject)>>,
    /// Where a lazy record's six attributes live, when they are plain writable slots.
    slots: Option<[isize; 6]>,
}

/// The attributes of a lazy record, in the order `make` fills them.
const LAZY_FIELDS: [&str; 6] = ["offset", "timestamp", "key", "value", "_headers", "_source"];

/// The instance offsets of `cls`'s slots named `LAZY_FIELDS`, when every one is a plain
/// writable object slot, `cls` sets attributes the generic way and its instances have no
/// `__dict__`: then storing into them is what `setattr` would do, without its lookups,
/// and nothing else can hang off a record. None otherwise (setattr runs).
fn slots(cls: &Bound<'_, PyType>) -> Option<[isize; 6]> {
    let tp = cls.as_type_ptr();
    // SAFETY: the GIL is held; `tp` is a live type, and a member descriptor's d_member
    // is the PyMemberDef it was made from (pyo3 declares the field with another type).
    unsafe {
        // An exported C function: one address, so comparing addresses is sound here.
        let generic = ffi::PyObject_GenericSetAttr as *const () as usize;
        let has_dict = (*tp).tp_dictoffset != 0;
        if has_dict || (*tp).tp_setattro.map(|setattro| setattro as usize) != Some(generic) {
            return None;
        }
        let mut offsets = [0isize; 6];
        for (at, name) in offsets.iter_mut().zip(LAZY_FIELDS) {
            let descr = cls.getattr(name).ok()?;
            let ptr = descr.as_ptr();
            if ffi::Py_TYPE(ptr) != std::ptr::addr_of_mut!(ffi::PyMemberDescr_Type) {
                return None;
            }
            let member = (*ptr.cast::<ffi::PyMemberDescrObject>())
                .d_member
                .cast::<ffi::PyMemberDef>();
            if (*member).type_code != ffi::Py_T_OBJECT_EX || (*member).flags & ffi::Py_READONLY != 0
            {
                return None;
            }
            *at = (*member).offset;
        }
        Some(offsets)
    }
}

fn int(py: Python<'_>, value: i128) -> PyObject {
    match i64::try_from(value) {
        // SAFETY: PyLong_FromLongLong returns a new reference or NULL with an exception.
        Ok(small) => unsafe {
            let ptr = ffi::PyLong_FromLongLong(small);
            if ptr.is_null() {
                return py.None();
            }
            PyObject::from_owned_ptr(py, ptr)
        },
        Err(_) => value
            .into_pyobject(py)
            .map(|v| v.into_any().unbind())
            .unwrap_or(py.None()),
    }
}

/// Whether the cycle collector tracks `obj`: a container that could lead back to a record.
fn tracked(obj: *mut ffi::PyObject) -> bool {
    // SAFETY: `obj` is a live object and the GIL is held.
    unsafe { ffi::PyObject_IS_GC(obj) == 1 && ffi::PyObject_GC_IsTracked(obj) == 1 }
}

impl<'py> Maker<'py> {
    /// The timestamp as an int, the previous record's object when it is the same value:
    /// the records of a batch mostly share their millisecond.
    fn timestamp(&self, value: i128) -> PyObject {
        let mut last = self.last_timestamp.borrow_mut();
        match &*last {
            Some((known, object)) if *known == value => object.clone_ref(self.py),
            _ => {
                let object = int(self.py, value);
                *last = Some((value, object.clone_ref(self.py)));
                object
            }
        }
    }

    fn field(&self, range: Field) -> PyObject {
        match range {
            None => self.py.None(),
            Some((start, len)) => PyBytes::new(self.py, cut(self.data.as_bytes(), start, len))
                .into_any()
                .unbind(),
        }
    }

    /// The record's headers: `()`, or `headers_of(data, start, stop)`, kept by raw bytes.
    fn headers(&self, block: Option<(u128, u128)>) -> Result<PyObject, Bad> {
        let Some((start, stop)) = block else {
            return Ok(self.empty.clone().into_any().unbind());
        };
        let call = || {
            self.headers_of
                .call1((self.data, start, stop))
                .map(Bound::unbind)
                .map_err(Bad::Raised)
        };
        let Some(sets) = self.header_sets else {
            return call();
        };
        let raw = PyBytes::new(self.py, cut(self.data.as_bytes(), start, stop - start));
        if let Some(known) = sets.get_item(&raw).map_err(Bad::Raised)? {
            return Ok(known.unbind());
        }
        let headers = call()?;
        if sets.len() < HEADER_SETS_KEPT {
            sets.set_item(raw, &headers).map_err(Bad::Raised)?;
        }
        Ok(headers)
    }

    fn make(&self, fields: Fields) -> Result<PyObject, Bad> {
        let py = self.py;
        let headers = self.headers(fields.headers)?;
        let items = [
            int(py, fields.offset),
            self.timestamp(fields.timestamp),
            self.field(fields.key),
            self.field(fields.value),
            headers,
        ];
        let tp = self.cls.as_type_ptr();
        // SAFETY: the GIL is held; tp_alloc returns a new, zeroed instance of `cls` (with
        // room for 5 items when it is a tuple subtype, as tuple.__new__ asks) or NULL
        // with an exception set. A tuple's slots are filled once, stealing references.
        unsafe {
            let alloc = (*tp).tp_alloc.unwrap_or(ffi::PyType_GenericAlloc);
            let obj = alloc(tp, if self.eager { 5 } else { 0 });
            if obj.is_null() {
                return Err(Bad::Raised(PyErr::fetch(py)));
            }
            let record = PyObject::from_owned_ptr(py, obj);
            if self.eager {
                let atomic = items.iter().all(|item| !tracked(item.as_ptr()));
                for (index, item) in items.into_iter().enumerate() {
                    ffi::PyTuple_SET_ITEM(obj, index as ffi::Py_ssize_t, item.into_ptr());
                }
                if atomic && tracked(obj) {
                    // What CPython does to a plain tuple of such items (the collector's
                    // _PyTuple_MaybeUntrack): nothing in it can lead back to it, so no
                    // cycle can hold it, and the collector need not scan it. A decoded
                    // partition holds millions of records; scanned, they cost more than
                    // decoding them.
                    ffi::PyObject_GC_UnTrack(obj.cast());
                }
                return Ok(record);
            }
            let [offset, timestamp, key, value, headers] = items;
            if let Some(offsets) = self.slots {
                let fields = [
                    offset,
                    timestamp,
                    key,
                    value,
                    headers,
                    self.source.clone().unbind(),
                ];
                for (at, item) in offsets.into_iter().zip(fields) {
                    // SAFETY: `at` is the offset of an object slot of `cls` (see `slots`),
                    // empty in a new instance; it takes the reference.
                    let slot = obj.cast::<u8>().offset(at).cast::<*mut ffi::PyObject>();
                    let old = std::mem::replace(&mut *slot, item.into_ptr());
                    ffi::Py_XDECREF(old);
                }
                if tracked(obj) {
                    // Its fields are atomic, the batch's shared source or the header
                    // reader, none of which refers to a record: no cycle can hold it
                    // while it is read-only, as records are by contract. Scanning
                    // millions of them was over a third of a consumer's decoding time.
                    ffi::PyObject_GC_UnTrack(obj.cast());
                }
                return Ok(record);
            }
            let bound = record.bind(py);
            let set = |name: &Bound<'py, pyo3::types::PyString>, item: PyObject| {
                bound.setattr(name, item).map_err(Bad::Raised)
            };
            set(pyo3::intern!(py, "offset"), offset)?;
            set(pyo3::intern!(py, "timestamp"), timestamp)?;
            set(pyo3::intern!(py, "key"), key)?;
            set(pyo3::intern!(py, "value"), value)?;
            set(pyo3::intern!(py, "_headers"), headers)?;
            set(pyo3::intern!(py, "_source"), self.source.clone().unbind())?;
            Ok(record)
        }
    }
}

/// `decoder._decode` compiled: the records of `data[start:end]` at or after
/// `min_offset`, as `(records, records skipped)`; raises `ValueError` with the Python
/// loop's message at the first bad record (`headers_of`'s own `ValueError` renamed so).
#[pyfunction]
#[pyo3(signature = (
    data, start, end, base_offset, base_timestamp, min_offset, dense, cls, source, headers_of,
    header_sets
))]
#[allow(clippy::too_many_arguments)]
pub fn decode_records<'py>(
    py: Python<'py>,
    data: &'py Bound<'py, PyBytes>,
    start: u64,
    end: u64,
    base_offset: i64,
    base_timestamp: i64,
    min_offset: i128,
    dense: bool,
    cls: &'py Bound<'py, PyType>,
    source: &'py Bound<'py, PyAny>,
    headers_of: &'py Bound<'py, PyAny>,
    header_sets: Option<&'py Bound<'py, PyDict>>,
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let eager = cls.is_subclass_of::<PyTuple>()?;
    let empty = PyTuple::empty(py);
    let last_timestamp = RefCell::new(None);
    let slots = if eager { None } else { slots(cls) };
    let maker = Maker {
        py,
        data,
        cls,
        eager,
        source,
        headers_of,
        header_sets,
        empty,
        last_timestamp,
        slots,
    };
    let batch = Batch {
        data: data.as_bytes(),
        end: u128::from(end),
        base_offset: i128::from(base_offset),
        base_timestamp: i128::from(base_timestamp),
        min_offset,
        dense,
    };
    let out = PyList::empty(py);
    let mut pos = u128::from(start);
    let mut skipped = 0usize;
    let mut offset = batch.base_offset - 1; // a dense batch's: the previous record's offset
    while pos < batch.end {
        let n = out.len() + skipped;
        let step = batch
            .record(pos, n, &mut offset)
            .and_then(|step| match step {
                Step::Skip(stop) => Ok((None, stop)),
                Step::Take(fields) => {
                    let stop = fields.stop;
                    maker.make(fields).map(|record| (Some(record), stop))
                }
            });
        match step {
            Ok((record, stop)) => {
                match record {
                    Some(record) => out.append(record)?,
                    None => skipped += 1,
                }
                pos = stop;
            }
            Err(Bad::Value(message)) => return Err(PyValueError::new_err(message)),
            Err(Bad::Raised(err)) if err.is_instance_of::<PyValueError>(py) => {
                let message = format!("record {n}'s headers: {}", err.value(py));
                return Err(PyValueError::new_err(message));
            }
            Err(Bad::Raised(err)) if !err.is_instance_of::<PyIndexError>(py) => return Err(err),
            Err(_) => {
                let message = format!("record {n} runs past the end of the batch");
                return Err(PyValueError::new_err(message));
            }
        }
    }
    Ok((out, skipped))
}
