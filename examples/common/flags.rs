//! The examples' command lines: `--flag value` pairs and bare `--flag`s, each value parsed with
//! the flag named in its error (`--steps: invalid digit found in string`).

use std::fmt::Display;
use std::str::FromStr;

/// A command line's arguments after the program name.
pub struct Flags {
    argv: Vec<String>,
}

impl Flags {
    /// The process's arguments.
    pub fn from_env() -> Flags {
        Flags { argv: std::env::args().skip(1).collect() }
    }

    /// Whether the bare flag `flag` is given.
    pub fn has(&self, flag: &str) -> bool {
        self.argv.iter().any(|a| a == flag)
    }

    /// The value after `flag`, if the flag is given with one.
    pub fn value(&self, flag: &str) -> Option<String> {
        self.argv.iter().position(|a| a == flag).and_then(|i| self.argv.get(i + 1)).cloned()
    }

    /// The value after `flag` parsed, `None` without the flag.
    pub fn parsed<T: FromStr>(&self, flag: &str) -> Result<Option<T>, String>
    where
        T::Err: Display,
    {
        self.value(flag).map(|v| v.parse().map_err(|e| format!("{flag} {v}: {e}"))).transpose()
    }

    /// The value after `flag` parsed, or `default`.
    pub fn or<T: FromStr>(&self, flag: &str, default: T) -> Result<T, String>
    where
        T::Err: Display,
    {
        Ok(self.parsed(flag)?.unwrap_or(default))
    }

    /// The comma-separated values after `flag` parsed, or `default`.
    pub fn list<T: FromStr + Clone>(&self, flag: &str, default: &[T]) -> Result<Vec<T>, String>
    where
        T::Err: Display,
    {
        match self.value(flag) {
            Some(v) => v.split(',').map(|x| x.parse().map_err(|e| format!("{flag} {v}: {e}"))).collect(),
            None => Ok(default.to_vec()),
        }
    }
}
