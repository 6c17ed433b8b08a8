//! The public API: memory, transfers, parameters, launch configurations, findings.
