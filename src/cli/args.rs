//! A small flag parser shared by every subcommand (ENGINE.md §3): `--flag`, `--flag VALUE`
//! and `--flag=VALUE`; a later flag overrides an earlier one; repeatable flags collect every
//! value; unknown flags are a usage error (exit 2) naming the flag.

use crate::error::{Error, Result};
use std::ffi::OsString;

/// What a subcommand accepts.
#[derive(Debug, Clone, Copy)]
pub enum Spec {
    /// `--name` without a value.
    Switch(&'static str),
    /// `--name VALUE` (the last occurrence wins).
    Value(&'static str),
    /// `--name VALUE`, repeatable (every occurrence kept, in order).
    Repeat(&'static str),
}

impl Spec {
    /// The flag name without dashes.
    pub fn name(&self) -> &'static str {
        match *self {
            Spec::Switch(n) | Spec::Value(n) | Spec::Repeat(n) => n,
        }
    }
}

/// The short flags and the long flag each stands for.
pub const SHORT_FLAGS: &[(&str, &str)] = &[("-h", "--help"), ("-p", "--prompt"), ("-n", "--gen")];

/// The long form of a short flag `text` when `specs` accept it (`-h` always).
fn short_flag(text: &str, specs: &[Spec]) -> Option<&'static str> {
    let &(_, long) = SHORT_FLAGS.iter().find(|(s, _)| *s == text)?;
    (long == "--help" || specs.iter().any(|s| s.name() == &long[2..])).then_some(long)
}

/// When `digits` is a decimal integer that `T` refused, the largest value `T` holds (the integer
/// overflowed); `None` for any other text (or a `T` that is not an integer type).
fn int_max<T: std::str::FromStr>(digits: &str) -> Option<String> {
    let d = digits.strip_prefix('+').unwrap_or(digits);
    if d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let maxes = [
        u128::MAX.to_string(),
        i128::MAX.to_string(),
        u64::MAX.to_string(),
        i64::MAX.to_string(),
        u32::MAX.to_string(),
        i32::MAX.to_string(),
        u16::MAX.to_string(),
        i16::MAX.to_string(),
        u8::MAX.to_string(),
        i8::MAX.to_string(),
    ];
    maxes.into_iter().find(|m| m.parse::<T>().is_ok())
}

/// The long form of a short flag with an inline value (`-p=hi` is `--prompt=hi`), when
/// `specs` accept it.
fn short_flag_inline(text: &str, specs: &[Spec]) -> Option<String> {
    let (flag, value) = text.split_once('=')?;
    short_flag(flag, specs).map(|long| format!("{long}={value}"))
}

/// The help command of a subcommand, from its usage's first line (`usage: k3 chat …` →
/// `k3 help chat`; the run's `usage: k3 <model_dir> …` → `k3 help run`).
fn help_command(usage: &str) -> String {
    let cmd = usage
        .trim_start()
        .strip_prefix("usage: k3 ")
        .and_then(|r| r.split_whitespace().next())
        .filter(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'));
    format!("k3 help {}", cmd.unwrap_or("run"))
}

/// Parsed arguments of one subcommand.
#[derive(Debug, Default)]
pub struct Args {
    /// Positional arguments in order (anything not starting with `--`, and everything after `--`).
    pub positional: Vec<OsString>,
    /// (flag name without dashes, value or None for switches), in command-line order.
    flags: Vec<(&'static str, Option<OsString>)>,
}

impl Args {
    /// Parses `argv` (without the program and subcommand names) against `specs`.
    ///
    /// Errors (exit 2): an unknown flag, a value flag without a value, a switch given `=value`.
    pub fn parse(argv: &[OsString], specs: &[Spec]) -> Result<Args> {
        Args::parse_for(argv, specs, "k3 --help")
    }

    /// [`parse`](Args::parse), an unknown flag pointing to `help` (the command's own usage:
    /// `k3 help chat`).
    fn parse_for(argv: &[OsString], specs: &[Spec], help: &str) -> Result<Args> {
        let mut out = Args::default();
        let mut i = 0;
        let mut only_positional = false;
        while i < argv.len() {
            let raw = &argv[i];
            i += 1;
            let text = raw.to_string_lossy();
            // Short forms (docs/cli.md): `-h`, and `-p`/`-n` where `--prompt`/`--gen` exist.
            // `-p=hi` is `--prompt=hi`, as `--prompt=hi` is `--prompt hi`.
            let text = match (short_flag(&text, specs), short_flag_inline(&text, specs)) {
                _ if only_positional => text,
                (Some(long), _) => std::borrow::Cow::Borrowed(long),
                (None, Some(long)) => std::borrow::Cow::Owned(long),
                _ => text,
            };
            if only_positional || !text.starts_with("--") || text == "-" {
                out.positional.push(raw.clone());
                continue;
            }
            if text == "--" {
                only_positional = true;
                continue;
            }
            let body = &text[2..];
            let (name, inline) = match body.find('=') {
                Some(eq) => (&body[..eq], Some(OsString::from(&body[eq + 1..]))),
                None => (body, None),
            };
            let spec = specs
                .iter()
                .find(|s| s.name() == name)
                .ok_or_else(|| Error::invalid(format!("unknown flag `--{name}` (see {help})")))?;
            match spec {
                Spec::Switch(n) => {
                    if inline.is_some() {
                        return Err(Error::invalid(format!("flag `--{n}` takes no value")));
                    }
                    out.flags.push((n, None));
                }
                Spec::Value(n) | Spec::Repeat(n) => {
                    let value = match inline {
                        Some(v) => v,
                        None => {
                            if i >= argv.len() {
                                return Err(Error::invalid(format!("flag `--{n}` needs a value")));
                            }
                            i += 1;
                            argv[i - 1].clone()
                        }
                    };
                    out.flags.push((n, Some(value)));
                }
            }
        }
        Ok(out)
    }

    /// [`parse`](Args::parse) for a subcommand with usage text: `--help` or `-h` (accepted whether or
    /// not `specs` lists it) prints `usage` on standard output and returns `None` (exit 0; exit 4
    /// when the usage cannot be written).
    /// A `--help` among otherwise bad flags still helps; a `--help` that is the value of a
    /// flag (`--text --help`) is that value.
    pub fn parse_or_help(argv: &[OsString], specs: &[Spec], usage: &str) -> Result<Option<Args>> {
        let mut with_help = specs.to_vec();
        if !specs.iter().any(|s| s.name() == "help") {
            with_help.push(Spec::Switch("help"));
        }
        match Args::parse_for(argv, &with_help, &help_command(usage)) {
            Ok(a) if a.switch("help") => {
                crate::cli::write_stdout(usage.as_bytes())?;
                Ok(None)
            }
            Ok(a) => Ok(Some(a)),
            Err(_) if argv.iter().any(|a| a == "--help" || a == "-h") => {
                crate::cli::write_stdout(usage.as_bytes())?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// True if the switch `--name` was given.
    pub fn switch(&self, name: &str) -> bool {
        self.flags.iter().any(|(n, _)| *n == name)
    }

    /// The last value of `--name`, as UTF-8 (error naming the flag if it is not UTF-8).
    pub fn value(&self, name: &str) -> Result<Option<String>> {
        match self.value_os(name) {
            None => Ok(None),
            Some(v) => v
                .into_string()
                .map(Some)
                .map_err(|_| Error::invalid(format!("flag `--{name}`: value is not valid UTF-8"))),
        }
    }

    /// The last value of `--name` as raw OS string (paths).
    pub fn value_os(&self, name: &str) -> Option<OsString> {
        self.flags
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.clone())
    }

    /// Every value of a repeatable `--name`, in order.
    pub fn values(&self, name: &str) -> Result<Vec<String>> {
        self.flags
            .iter()
            .filter(|(n, _)| *n == name)
            .filter_map(|(_, v)| v.clone())
            .map(|v| {
                v.into_string().map_err(|_| {
                    Error::invalid(format!("flag `--{name}`: value is not valid UTF-8"))
                })
            })
            .collect()
    }

    /// The last value of `--name` parsed as `T`, with an error naming the flag and the value.
    pub fn parsed<T: std::str::FromStr>(&self, name: &str, what: &str) -> Result<Option<T>> {
        match self.value(name)? {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<T>()
                .map(Some)
                .map_err(|_| match int_max::<T>(v.trim()) {
                    Some(max) => Error::invalid(format!(
                        "flag `--{name}`: `{v}` is too large: {what} of at most {max}"
                    )),
                    None => Error::invalid(format!("flag `--{name}`: `{v}` is not {what}")),
                }),
        }
    }

    /// The one positional argument of `cmd` (`inspect`, `verify`): its model directory.
    /// Errors (exit 2): none or several, naming `cmd` and ending with `(hint)`.
    pub fn model_dir(&self, cmd: &str, hint: &str) -> Result<std::path::PathBuf> {
        match self.positional.as_slice() {
            [d] => Ok(std::path::PathBuf::from(d)),
            [] => Err(Error::invalid(format!(
                "{cmd}: missing <model_dir> ({hint})"
            ))),
            more => Err(Error::invalid(format!(
                "{cmd}: expected one <model_dir>, got {} arguments ({hint})",
                more.len()
            ))),
        }
    }

    /// Which of the given flags appeared (for "exactly one of" checks).
    pub fn present<'a>(&self, names: &[&'a str]) -> Vec<&'a str> {
        names
            .iter()
            .copied()
            .filter(|n| self.flags.iter().any(|(m, _)| m == n))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn later_value_wins_and_repeat_collects() {
        let specs = [
            Spec::Value("gen"),
            Spec::Repeat("stop-id"),
            Spec::Switch("json"),
        ];
        let a = Args::parse(
            &os(&[
                "dir",
                "--gen",
                "3",
                "--stop-id=5",
                "--gen=4",
                "--stop-id",
                "6",
                "--json",
            ]),
            &specs,
        )
        .unwrap();
        assert_eq!(a.positional, os(&["dir"]));
        assert_eq!(a.value("gen").unwrap().as_deref(), Some("4"));
        assert_eq!(a.values("stop-id").unwrap(), vec!["5", "6"]);
        assert!(a.switch("json"));
        assert_eq!(a.parsed::<u32>("gen", "an integer").unwrap(), Some(4));
    }

    #[test]
    fn short_flags_stand_for_long_ones_where_accepted() {
        let specs = [
            Spec::Value("gen"),
            Spec::Value("prompt"),
            Spec::Switch("help"),
        ];
        let a = Args::parse(&os(&["-n", "3", "dir", "-p", "hi", "-h"]), &specs).unwrap();
        assert_eq!(a.positional, os(&["dir"]));
        assert_eq!(a.value("gen").unwrap().as_deref(), Some("3"));
        assert_eq!(a.value("prompt").unwrap().as_deref(), Some("hi"));
        assert!(a.switch("help"));
        // Not accepted by this command: a positional, as before; after `--` always positional.
        let a = Args::parse(&os(&["-p", "--", "-n"]), &[Spec::Switch("help")]).unwrap();
        assert_eq!(a.positional, os(&["-p", "-n"]));
    }

    #[test]
    fn unknown_and_missing_values_are_usage_errors() {
        let specs = [Spec::Value("gen")];
        let e = Args::parse(&os(&["--bogus"]), &specs).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message.contains("--bogus"));
        let e = Args::parse(&os(&["--gen"]), &specs).unwrap_err();
        assert!(e.message.contains("--gen"));
        let a = Args::parse(&os(&["--gen", "x"]), &specs).unwrap();
        let e = a.parsed::<u32>("gen", "an integer").unwrap_err();
        assert!(e.message.contains("--gen") && e.message.contains("`x`"));
    }
}
