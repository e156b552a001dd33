//! Device-properties documents across cuDNN versions: one `cudnn-graph devprop` file serves every
//! supported cuDNN.
//!
//! The document (`CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION`) is a flat JSON object whose keys
//! cuDNN reads with `HasMember` checks: a key that the loaded version reads and the document lacks
//! fails `cudnnBackendFinalize` with `CUDNN_STATUS_BAD_PARAM` and `!json_object.HasMember(key)`,
//! without naming the key. Newer versions read more keys ([`VERSIONED_KEYS`]), so a document
//! written with 9.19 is refused by 9.27. Keys a version does not read are ignored (measured on
//! 9.14, 9.19, 9.27 and 9.28: an extra key finalizes), so a document carrying every key serves
//! all of them.
//!
//! [`for_version`] makes the document the loaded cuDNN reads out of any document: it fills each
//! key that version reads and the document lacks from the properties the document already has,
//! and drops the keys of [`VERSIONED_KEYS`] that version does not read (none is rejected today;
//! dropping them keeps what reaches cuDNN exactly what it reads). [`complete`] fills every key of
//! every version, for writing a file (`cudnn-graph devprop`).

use serde_json::{Map, Value};

/// A device-properties key that only some cuDNN versions read, and how to fill it from the
/// properties of a document that lacks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionedKey {
    /// The JSON key.
    pub name: &'static str,
    /// The first cuDNN version (`cudnnGetVersion()` encoding, `92700` is 9.27.0) that reads it,
    /// and refuses a document without it.
    pub since: usize,
    /// How a document without it gets it.
    pub fill: Fill,
}

/// How [`for_version`] fills a key a document lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// A fixed value: `smCountOrigin` is an enum (`cudnnSmCountOrigin`: 0 is
    /// `CUDNN_SM_COUNT_ORIGIN_FULL_DEVICE`, the whole device, what a document read off a GPU
    /// without a green context describes).
    Value(i64),
    /// The value of another key of the document: `oversizedSharedMemoryPerBlock` (CUDA 13.1's
    /// `cudaDevAttrOversizedSharedMemoryPerBlock`, shared memory beyond the opt-in maximum at the
    /// cost of L1) is the opt-in maximum itself where no oversized configuration is known, which
    /// is what a driver without the attribute offers.
    Copy(&'static str),
    /// `memoryBusWidth` (`cudaDevAttrGlobalMemoryBusWidth`, bits): a property of the memory
    /// that no other key gives; looked up by `deviceName` in [`BUS_WIDTHS`].
    BusWidth,
}

/// The keys read by some supported cuDNN versions and not by others, oldest first. Measured on
/// the cu13 wheels (the key names in each `libcudnn_graph.so.9`, and finalizing the H200's 9.19
/// document): 9.14.0 to 9.22.0 read none of them; `smCountOrigin` from 9.23.0,
/// `oversizedSharedMemoryPerBlock` from 9.26.0, `memoryBusWidth` from 9.27.0 (9.27.0 and 9.28.1
/// refuse a document without any of the three).
pub const VERSIONED_KEYS: &[VersionedKey] = &[
    VersionedKey { name: "smCountOrigin", since: SM_COUNT_ORIGIN_SINCE, fill: Fill::Value(0) },
    VersionedKey {
        name: "oversizedSharedMemoryPerBlock",
        since: OVERSIZED_SINCE,
        fill: Fill::Copy("maxSharedMemoryPerBlockOptin"),
    },
    VersionedKey { name: "memoryBusWidth", since: BUS_WIDTH_SINCE, fill: Fill::BusWidth },
];

const SM_COUNT_ORIGIN_SINCE: usize = 92300;
const OVERSIZED_SINCE: usize = 92600;
const BUS_WIDTH_SINCE: usize = 92700;

/// Global memory bus width in bits by device name (the first entry whose text `deviceName`
/// contains wins, so the more specific names come first). Two entries are the driver's own
/// figure (`CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH`, what cuDNN reads on the GPU), checked
/// by the GPU test `gpu_devprop` on the lent machines: the H100 80GB HBM3's 5120 and the H200's
/// 6016, not the 6144 its six HBM3e stacks of 1024 bits would give (read 2026-12-07). The others
/// are the published memory configurations (1024 bits an HBM stack), not yet read off a driver.
pub const BUS_WIDTHS: &[(&str, i64)] = &[
    ("H200", 6016),
    ("H100 NVL", 6144),
    ("H100", 5120),
    ("H800", 5120),
    ("A100", 5120),
    ("A800", 5120),
    ("B200", 8192),
    ("B300", 8192),
    ("L40", 384),
    ("RTX 6000 Ada", 384),
    ("L4", 192),
];

/// Why a device-properties document cannot be made into the one a cuDNN version reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DevicePropertiesError {
    /// Not a JSON object.
    #[error("the device-properties document is not a JSON object: {reason}")]
    NotAnObject {
        /// What the JSON parser said, or what the document is instead.
        reason: String,
    },
    /// A key the version reads is missing and cannot be filled from the rest of the document.
    #[error(
        "the device-properties document has no `{key}`, which cuDNN {version} reads, and it cannot be \
         derived from the document ({reason}); add it, or write the document again with \
         `cudnn-graph devprop` on that GPU"
    )]
    Unfillable {
        /// The missing key.
        key: &'static str,
        /// The cuDNN version that needs it, as `9.27.0`.
        version: String,
        /// Why no value could be derived.
        reason: String,
    },
}

pub use crate::capabilities::version_string;

/// The document cuDNN `version` reads, made from `json`: every key of [`VERSIONED_KEYS`] that
/// version reads and `json` lacks is filled, every one it does not read is dropped, and every
/// other key is kept as it is (in order). A document that already is what `version` reads comes
/// back unchanged, byte for byte.
///
/// ```
/// # use cudnn_runtime as cudnn_graph;
/// use cudnn_graph::backend::devprop;
/// let written_by_9_19 = r#"{"deviceName":"NVIDIA H200","maxSharedMemoryPerBlockOptin":232448}"#;
/// let for_9_28 = devprop::for_version(written_by_9_19, 92801)?;
/// let v: serde_json::Value = serde_json::from_str(&for_9_28)?;
/// assert_eq!(v["memoryBusWidth"], 6016);
/// assert_eq!(v["smCountOrigin"], 0);
/// assert_eq!(devprop::for_version(&for_9_28, 91900)?, written_by_9_19);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn for_version(json: &str, version: usize) -> Result<String, DevicePropertiesError> {
    let mut doc = parse(json)?;
    let mut changed = false;
    for key in VERSIONED_KEYS {
        if key.since <= version {
            if !doc.contains_key(key.name) {
                let value = fill(&doc, key, version)?;
                doc.insert(key.name.to_string(), value);
                changed = true;
            }
        } else {
            changed |= doc.remove(key.name).is_some();
        }
    }
    Ok(if changed { Value::Object(doc).to_string() } else { json.to_string() })
}

/// `json` with every key of [`VERSIONED_KEYS`] present (those it has kept as they are): the
/// document every supported cuDNN reads, for writing to a file.
pub fn complete(json: &str) -> Result<String, DevicePropertiesError> {
    let mut doc = parse(json)?;
    let newest = VERSIONED_KEYS.iter().map(|k| k.since).max().unwrap_or(0);
    for key in VERSIONED_KEYS {
        if !doc.contains_key(key.name) {
            let value = fill(&doc, key, newest)?;
            doc.insert(key.name.to_string(), value);
        }
    }
    Ok(Value::Object(doc).to_string())
}

/// `json` with `key` set to `value` (kept in place when present, appended otherwise): what
/// `cudnn-graph devprop` adds from the driver where the loaded cuDNN did not write a key.
pub fn with_key(json: &str, key: &str, value: i64) -> Result<String, DevicePropertiesError> {
    let mut doc = parse(json)?;
    doc.insert(key.to_string(), Value::from(value));
    Ok(Value::Object(doc).to_string())
}

fn parse(json: &str) -> Result<Map<String, Value>, DevicePropertiesError> {
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(doc)) => Ok(doc),
        Ok(other) => Err(DevicePropertiesError::NotAnObject { reason: format!("it is `{other}`") }),
        Err(e) => Err(DevicePropertiesError::NotAnObject { reason: e.to_string() }),
    }
}

fn fill(doc: &Map<String, Value>, key: &VersionedKey, version: usize) -> Result<Value, DevicePropertiesError> {
    let unfillable =
        |reason: String| DevicePropertiesError::Unfillable { key: key.name, version: version_string(version), reason };
    match key.fill {
        Fill::Value(v) => Ok(Value::from(v)),
        Fill::Copy(from) => match doc.get(from) {
            Some(v) if v.is_i64() || v.is_u64() => Ok(v.clone()),
            Some(v) => Err(unfillable(format!("`{from}` is `{v}`, not an integer"))),
            None => Err(unfillable(format!("it is copied from `{from}`, which the document lacks too"))),
        },
        Fill::BusWidth => {
            let name = doc.get("deviceName").and_then(Value::as_str);
            match name.and_then(|name| BUS_WIDTHS.iter().find(|(n, _)| name.contains(n))) {
                Some((_, bits)) => Ok(Value::from(*bits)),
                None => Err(unfillable(format!(
                    "the memory bus width of device {} is not known here",
                    name.map_or("(no `deviceName`)".to_string(), |n| format!("`{n}`"))
                ))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The repository's H200 document, as cuDNN 9.19 writes it.
    const H200_9_19: &str = include_str!("../../../tests/fixtures/h200-devprop.json");

    fn object(json: &str) -> Map<String, Value> {
        parse(json).unwrap()
    }

    #[test]
    fn a_9_19_document_gains_what_9_27_reads_from_its_own_properties() {
        let adapted = object(&for_version(H200_9_19, 92700).unwrap());
        assert_eq!(adapted["smCountOrigin"], 0);
        assert_eq!(adapted["memoryBusWidth"], 6016);
        assert_eq!(adapted["oversizedSharedMemoryPerBlock"], 232448);
        // Every property it had is kept, value for value.
        let original = object(H200_9_19);
        for (k, v) in &original {
            assert_eq!(&adapted[k], v, "{k}");
        }
        assert_eq!(adapted.len(), original.len() + 3);
    }

    #[test]
    fn each_key_arrives_with_its_version() {
        let at = |version| object(&for_version(H200_9_19, version).unwrap());
        assert!(!at(92201).contains_key("smCountOrigin"));
        assert!(at(92300).contains_key("smCountOrigin"));
        assert!(!at(92501).contains_key("oversizedSharedMemoryPerBlock"));
        assert!(at(92600).contains_key("oversizedSharedMemoryPerBlock"));
        assert!(!at(92600).contains_key("memoryBusWidth"));
        assert!(at(92700).contains_key("memoryBusWidth"));
        assert!(at(92801).contains_key("oversizedSharedMemoryPerBlock"));
    }

    #[test]
    fn a_document_the_version_reads_is_passed_through_unchanged() {
        assert_eq!(for_version(H200_9_19, 91900).unwrap(), H200_9_19);
        assert_eq!(for_version(H200_9_19, 91000).unwrap(), H200_9_19);
        let for_9_28 = for_version(H200_9_19, 92801).unwrap();
        assert_eq!(for_version(&for_9_28, 92801).unwrap(), for_9_28);
    }

    #[test]
    fn values_a_document_has_are_never_replaced() {
        let written_by_9_28 = with_key(&complete(H200_9_19).unwrap(), "oversizedSharedMemoryPerBlock", 240000).unwrap();
        let written_by_9_28 = with_key(&written_by_9_28, "memoryBusWidth", 4096).unwrap();
        let adapted = object(&for_version(&written_by_9_28, 92801).unwrap());
        assert_eq!(adapted["oversizedSharedMemoryPerBlock"], 240000);
        assert_eq!(adapted["memoryBusWidth"], 4096);
    }

    #[test]
    fn an_older_version_gets_the_newer_keys_dropped() {
        let complete = complete(H200_9_19).unwrap();
        assert_eq!(object(&complete).len(), object(H200_9_19).len() + 3);
        assert_eq!(object(&for_version(&complete, 91900).unwrap()), object(H200_9_19));
        assert_eq!(object(&for_version(&complete, 91400).unwrap()), object(H200_9_19));
        let at_9_23 = object(&for_version(&complete, 92300).unwrap());
        assert!(at_9_23.contains_key("smCountOrigin") && !at_9_23.contains_key("memoryBusWidth"));
    }

    #[test]
    fn keys_unknown_here_are_kept_for_the_version_that_reads_them() {
        let future = with_key(H200_9_19, "someKeyOf9_40", 7).unwrap();
        assert_eq!(object(&for_version(&future, 92801).unwrap())["someKeyOf9_40"], 7);
        assert_eq!(object(&for_version(&future, 91900).unwrap())["someKeyOf9_40"], 7);
    }

    #[test]
    fn an_unknown_device_names_the_key_it_cannot_fill() {
        let doc = r#"{"deviceName":"Some Future GPU","maxSharedMemoryPerBlockOptin":1}"#;
        let e = for_version(doc, 92700).unwrap_err();
        assert_eq!(
            e,
            DevicePropertiesError::Unfillable {
                key: "memoryBusWidth",
                version: "9.27.0".into(),
                reason: "the memory bus width of device `Some Future GPU` is not known here".into(),
            }
        );
        assert!(e.to_string().contains("has no `memoryBusWidth`, which cuDNN 9.27.0 reads"), "{e}");
        // Not needed by 9.19: no error.
        assert_eq!(for_version(doc, 91900).unwrap(), doc);
        let e = for_version(r#"{"deviceName":"NVIDIA H100 80GB HBM3"}"#, 92700).unwrap_err();
        assert!(matches!(e, DevicePropertiesError::Unfillable { key: "oversizedSharedMemoryPerBlock", .. }), "{e}");
    }

    #[test]
    fn bus_widths_prefer_the_specific_name() {
        let width = |name: &str| {
            let doc = format!(r#"{{"deviceName":"{name}","maxSharedMemoryPerBlockOptin":1}}"#);
            object(&for_version(&doc, 92700).unwrap())["memoryBusWidth"].as_i64()
        };
        assert_eq!(width("NVIDIA H100 NVL"), Some(6144));
        assert_eq!(width("NVIDIA H100 80GB HBM3"), Some(5120));
        assert_eq!(width("NVIDIA H200"), Some(6016));
        assert_eq!(width("NVIDIA L40S"), Some(384));
    }

    #[test]
    fn not_an_object_is_an_error() {
        assert!(matches!(for_version("[1]", 92700), Err(DevicePropertiesError::NotAnObject { .. })));
        assert!(matches!(for_version("{", 92700), Err(DevicePropertiesError::NotAnObject { .. })));
    }

    #[test]
    fn versions_read_as_cudnn_writes_them() {
        assert_eq!(version_string(92801), "9.28.1");
        assert_eq!(version_string(91900), "9.19.0");
        assert_eq!(version_string(91002), "9.10.2");
    }
}
