//! The plan cache's entry files: read with a size limit before parsing ([`read_entry`]), parsed
//! with or without a signature ([`parse_with`]), written so that no reader sees a torn file
//! ([`write_atomically`]).

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::keys::PlanKey;
use crate::payload::plan::{parse_payload, parse_signed_payload, Payload, PayloadError, PayloadKey, MAX_PAYLOAD_BYTES};

/// Distinguishes the temporary files of threads of one process.
static TEMP_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Parses an entry's bytes, with the signature check if there is a key.
pub(super) fn parse_with(key: Option<&PayloadKey>, bytes: &[u8]) -> Result<Payload, PayloadError> {
    match key {
        Some(key) => parse_signed_payload(bytes, key),
        None => parse_payload(bytes),
    }
}

/// Why an entry file was not read.
enum EntryRead {
    Io(std::io::Error),
    TooLarge(u64),
}

/// Reads an entry file, refusing one over [`MAX_PAYLOAD_BYTES`] before reading it (and one that
/// grows past it while being read).
fn read_entry(path: &Path) -> Result<Vec<u8>, EntryRead> {
    use std::io::Read;
    let file = fs::File::open(path).map_err(EntryRead::Io)?;
    let len = file.metadata().map_err(EntryRead::Io)?.len();
    let limit = MAX_PAYLOAD_BYTES as u64;
    if len > limit {
        return Err(EntryRead::TooLarge(len));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(limit + 1).read_to_end(&mut bytes).map_err(EntryRead::Io)?;
    if bytes.len() as u64 > limit {
        return Err(EntryRead::TooLarge(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Writes `bytes` to `path` so that no reader ever sees a partial file: a uniquely named
/// temporary in the same directory, synced, then renamed over `path`.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("entry");
    let unique = format!(
        ".{name}.{}.{}.{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
    );
    let temp = dir.join(unique);
    let written = (|| {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).open(&temp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

/// An entry file read for a key.
pub(super) enum Read {
    /// There is no file.
    Missing,
    /// The file cannot be read (it stays): why.
    Unreadable(String),
    /// The file failed a check, to be evicted: why.
    Bad(String),
    /// Its payload, parsed (signed, where `signing` is given) and filed under the key looked up,
    /// and its size in bytes.
    Payload(Box<Payload>, usize),
}

/// Reads the entry file at `path` for `key`: size limit, parse (with the signature check where
/// there is a `signing` key), and the key its record names.
pub(super) fn read_for(path: &Path, key: &PlanKey, signing: Option<&PayloadKey>) -> Read {
    let bytes = match read_entry(path) {
        Ok(b) => b,
        Err(EntryRead::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Read::Missing,
        Err(EntryRead::Io(e)) => return Read::Unreadable(format!("cannot be read: {e}")),
        Err(EntryRead::TooLarge(len)) => return Read::Bad(PayloadError::TooLarge(len).to_string()),
    };
    let payload = match parse_with(signing, &bytes) {
        Ok(p) => p,
        Err(e) => return Read::Bad(e.to_string()),
    };
    match PlanKey::of_record(&payload.plan) {
        Some(k) if k == *key => Read::Payload(Box::new(payload), bytes.len()),
        Some(k) => Read::Bad(format!("it holds the plan of {k}, not {key}")),
        None => Read::Bad(format!("its graph fingerprint `{}` is not hex", payload.plan.graph_fingerprint)),
    }
}

/// Reads and parses the payload file at `path` (seeding): the payload and its size, or why not.
pub(super) fn read_payload(path: &Path, signing: Option<&PayloadKey>) -> Result<(Payload, usize), String> {
    match read_entry(path) {
        Ok(b) => parse_with(signing, &b).map(|p| (p, b.len())).map_err(|e| e.to_string()),
        Err(EntryRead::Io(e)) => Err(e.to_string()),
        Err(EntryRead::TooLarge(len)) => Err(PayloadError::TooLarge(len).to_string()),
    }
}

/// Removes an entry file that failed its checks, so that no later lookup (in this process or
/// another) reads it again; says how that went (`evicted`, or why it could not be removed).
pub(super) fn remove(path: &Path) -> String {
    match fs::remove_file(path) {
        Ok(()) => "evicted".to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "evicted".to_string(),
        Err(e) => format!("ignored (it could not be removed: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_replace_whole_files_and_leave_no_temporaries() {
        let dir = std::env::temp_dir().join(format!("cudnn-graph-atomic-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("entry.plan.json");
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second, longer").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second, longer");
        let left: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from("entry.plan.json")]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
