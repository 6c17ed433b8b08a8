//! The tuning progress bar: indicatif on a terminal, nothing otherwise.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

pub(crate) struct Progress(Option<ProgressBar>);

impl Progress {
    pub fn new(len: usize, kernel: &str) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::new(len as u64);
        if let Ok(style) =
            ProgressStyle::with_template("tuning {msg} [{bar:30}] {pos}/{len} candidates")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(kernel.to_string());
        Progress(Some(bar))
    }

    pub fn inc(&self) {
        if let Some(b) = &self.0 {
            b.inc(1);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
