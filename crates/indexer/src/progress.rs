//! Progress reporting: an indicatif bar on a terminal, sparse plain lines otherwise (CI logs),
//! nothing at all when quiet. Everything goes to stderr; stdout carries only results.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    tty: bool,
    quiet: bool,
    last_line: Mutex<Option<Instant>>,
}

impl Progress {
    /// Bars on a terminal, lines otherwise.
    pub fn auto(quiet: bool) -> Progress {
        Progress {
            tty: std::io::stderr().is_terminal(),
            quiet,
            last_line: Mutex::new(None),
        }
    }

    /// No output at all (tests, library use).
    pub fn silent() -> Progress {
        Progress {
            tty: false,
            quiet: true,
            last_line: Mutex::new(None),
        }
    }

    /// A bar of `len` steps; hidden unless stderr is a terminal.
    pub fn bar(&self, len: u64, label: &str) -> ProgressBar {
        if self.quiet || !self.tty {
            let b = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
            return b;
        }
        let b = ProgressBar::new(len);
        let style =
            ProgressStyle::with_template("{prefix:>6} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
        b.set_style(style);
        b.set_prefix(label.to_string());
        b
    }

    /// A line on stderr, unless quiet.
    pub fn line(&self, msg: &str) {
        if !self.quiet {
            eprintln!("{msg}");
        }
    }

    /// A line at most every ten seconds, and only where no bar is drawn (CI logs).
    pub fn tick_line(&self, msg: &str) {
        if self.quiet || self.tty {
            return;
        }
        let mut last = self.last_line.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
            *last = Some(Instant::now());
            eprintln!("{msg}");
        }
    }
}
