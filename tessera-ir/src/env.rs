//! Reading `TESSERA_*` environment variables: a value that is set but not one of the accepted
//! ones is an [`EnvError`] naming the variable, the value and what is accepted — never silently
//! ignored.

/// A `TESSERA_*` variable set to a value it does not accept.
///
/// ```
/// let e = tessera_ir::env::EnvError::new("TESSERA_DUMP", "zzz", "graph, fusion, schedule, tile or all");
/// assert_eq!(e.to_string(), "TESSERA_DUMP=\"zzz\" is not valid: expected graph, fusion, schedule, tile or all");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?} is not valid: expected {accepted}")]
pub struct EnvError {
    /// The variable, e.g. `TESSERA_DUMP`.
    pub var: String,
    /// The value found (lossily decoded when it is not UTF-8).
    pub value: String,
    /// The accepted values, in words.
    pub accepted: String,
}

impl EnvError {
    /// Builds the error.
    pub fn new(var: &str, value: &str, accepted: &str) -> Self {
        EnvError {
            var: var.into(),
            value: value.into(),
            accepted: accepted.into(),
        }
    }
}

/// The variable's value: `Ok(None)` when unset, an error when it is not UTF-8.
pub fn var(name: &str, accepted: &str) -> Result<Option<String>, EnvError> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(EnvError::new(name, &v.to_string_lossy(), accepted))
        }
    }
}

/// An on/off variable: `1`, `on`, `true`, `yes` or `0`, `off`, `false`, `no` (any case, spaces
/// trimmed); `Ok(None)` when unset or empty.
///
/// ```
/// assert_eq!(tessera_ir::env::flag("TESSERA_DOC_UNSET_FLAG"), Ok(None));
/// ```
pub fn flag(name: &str) -> Result<Option<bool>, EnvError> {
    const ACCEPTED: &str = "1, on, true, yes, 0, off, false or no";
    let Some(v) = var(name, ACCEPTED)? else {
        return Ok(None);
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "1" | "on" | "true" | "yes" => Ok(Some(true)),
        "0" | "off" | "false" | "no" => Ok(Some(false)),
        _ => Err(EnvError::new(name, &v, ACCEPTED)),
    }
}
