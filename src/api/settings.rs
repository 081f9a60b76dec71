//! Every setting of the library, composed from the groups the layers own: the
//! runtime's ([`Config`]: transport, heap, AMs, progress, waiting, diagnostics), Firehose's
//! ([`FirehoseSettings`]), the sync subsystem's ([`SyncSettings`]) and the RMA
//! subsystem's ([`RmaSettings`]).
//!
//! Guarantees: values are layered: default, then the caller's `fh_config_t`, then
//! the environment (the environment wins). Each resolved value remembers where it
//! came from so `fh_config_print` can say so. A value that does not parse is an
//! `FH_ERR_INVALID_ARG` naming the variable, never a silent default. The job-wide
//! settings of every group are what `fh_init` compares across ranks.

use super::rma::settings::RmaSettings;
use super::sync::settings::SyncSettings;
use crate::firehose::settings::FirehoseSettings;
use crate::runtime::config::{self, Config, Group, Layered, Resolved, Rows, Scope, Source};
use crate::runtime::error::Result;

/// The resolved settings of one context. Dereferences to the runtime's group, which
/// is what most of the library reads.
#[derive(Clone, Debug)]
pub struct Settings {
    pub core: Config,
    pub firehose: FirehoseSettings,
    pub sync: SyncSettings,
    pub rma: RmaSettings,
    /// `sources[i]` is where setting `i` came from (see [`Settings::names`]).
    pub sources: Vec<Source>,
}

impl std::ops::Deref for Settings {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.core
    }
}

impl std::ops::DerefMut for Settings {
    fn deref_mut(&mut self) -> &mut Config {
        &mut self.core
    }
}

/// One setting as `firehose_info` shows it.
#[derive(Clone, Debug)]
pub struct SettingRow {
    pub name: &'static str,
    pub value: String,
    pub default: String,
    pub source: Source,
    pub scope: Scope,
    pub help: &'static str,
}

impl Settings {
    /// The groups as one table.
    fn view(&self) -> Layered<&dyn Rows> {
        Layered {
            groups: vec![&self.core, &self.firehose, &self.sync, &self.rma],
        }
    }

    fn view_mut(&mut self) -> Layered<&mut dyn Rows> {
        Layered {
            groups: vec![
                &mut self.core,
                &mut self.firehose,
                &mut self.sync,
                &mut self.rma,
            ],
        }
    }

    /// Defaults only.
    pub fn defaults() -> Settings {
        let mut s = Settings {
            core: Config::defaults(),
            firehose: FirehoseSettings::defaults(),
            sync: SyncSettings::defaults(),
            rma: RmaSettings::defaults(),
            sources: Vec::new(),
        };
        s.sources = vec![Source::Default; s.view().len()];
        s
    }

    /// Defaults, then `overrides` (name, value) from the caller's struct, then `env`.
    pub fn resolve(
        overrides: &[(&'static str, String)],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Settings> {
        let mut s = Settings::defaults();
        let mut sources = std::mem::take(&mut s.sources);
        s.view_mut().resolve(&mut sources, overrides, env)?;
        s.sources = sources;
        Ok(s)
    }

    /// Resolve from the process environment.
    pub fn from_env(overrides: &[(&'static str, String)]) -> Result<Settings> {
        Settings::resolve(overrides, |n| std::env::var(n).ok())
    }

    /// Every setting's name, in table order.
    pub fn names() -> Vec<&'static str> {
        let d = Settings::defaults();
        let l = d.view();
        (0..l.len()).map(|i| l.name(i)).collect()
    }

    /// Index of a setting by name.
    pub fn index(name: &str) -> Option<usize> {
        Settings::names().iter().position(|&n| n == name)
    }

    /// The value of setting `i` as text.
    pub fn show(&self, i: usize) -> String {
        self.view().show(i)
    }

    /// Every setting as a row: name, value, default, source, scope, help
    /// (`firehose_info`).
    pub fn rows(&self) -> Vec<SettingRow> {
        let (v, d) = (self.view(), Settings::defaults());
        let dv = d.view();
        (0..v.len())
            .map(|i| SettingRow {
                name: v.name(i),
                value: v.show(i),
                default: dv.show(i),
                source: self.sources[i],
                scope: v.scope(i),
                help: v.help(i),
            })
            .collect()
    }

    /// Every setting, its value, its source and its scope, one per line.
    pub fn render(&self) -> String {
        self.view().render(&self.sources)
    }

    /// `FH_*` environment variables that are not settings, with the nearest name.
    pub fn unknown_env(vars: impl Iterator<Item = String>) -> Vec<(String, Option<&'static str>)> {
        config::unknown_env(&Settings::names(), vars)
    }
}

impl Resolved for Settings {
    fn core(&self) -> &Config {
        &self.core
    }

    fn agreement(&self) -> Vec<(usize, u64)> {
        self.view().agreement()
    }

    fn agreed_count() -> usize {
        Settings::defaults().agreement().len()
    }

    fn name(i: usize) -> &'static str {
        Settings::names()[i]
    }

    fn value(&self, i: usize) -> String {
        self.show(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::config::{Progress, Scope};
    use crate::runtime::error::Status;

    #[test]
    fn defaults_parse_and_layers_apply_in_order() {
        let d = Settings::defaults();
        assert_eq!(d.progress, Progress::Poll);
        assert_eq!(
            (d.credits_for(2), d.credits_for(128), d.credits_for(100_000)),
            (64, 32, 8)
        );
        assert!(d.sources.iter().all(|s| *s == Source::Default));

        let over = [
            ("FH_HEAP_SIZE", "8M".to_string()),
            ("FH_AM_CREDITS", "4".to_string()),
        ];
        let c =
            Settings::resolve(&over, |n| (n == "FH_AM_CREDITS").then(|| "7".to_string())).unwrap();
        assert_eq!(c.heap_size, 8 << 20);
        assert_eq!(
            c.sources[Settings::index("FH_HEAP_SIZE").unwrap()],
            Source::Struct
        );
        assert_eq!(c.am_credits, 7, "environment wins over the struct");
        assert_eq!(
            c.sources[Settings::index("FH_AM_CREDITS").unwrap()],
            Source::Env
        );
        assert!(c.render().contains(
            "FH_AM_CREDITS               = 7          (environment; same on every rank)"
        ));
    }

    #[test]
    fn an_empty_variable_means_the_default_for_every_setting() {
        let d = Settings::defaults();
        for (i, name) in Settings::names().into_iter().enumerate() {
            let c = Settings::resolve(&[], |n| (n == name).then(String::new)).unwrap();
            assert_eq!(c.show(i), d.show(i), "{}", name);
            assert_eq!(c.sources[i], Source::Default, "{}", name);
        }
    }

    #[test]
    fn sizes_beyond_the_limit_are_refused_not_wrapped() {
        for v in ["18446744073709551615", "2P", "1048577G"] {
            let e =
                Settings::resolve(&[], |n| (n == "FH_HEAP_SIZE").then(|| v.into())).unwrap_err();
            assert!(e.msg.contains("FH_HEAP_SIZE"), "{}", e.msg);
        }
        let over = [("FH_HEAP_SIZE", usize::MAX.to_string())];
        let e = Settings::resolve(&over, |_| None).unwrap_err();
        assert!(
            e.msg.contains("FH_HEAP_SIZE") && e.msg.contains("fh_config_t"),
            "{}",
            e.msg
        );
    }

    #[test]
    fn agreement_covers_job_settings_only() {
        let d = Settings::defaults();
        let a = d.agreement();
        assert!(a.iter().all(|&(i, _)| d.view().scope(i) == Scope::Job));
        let heap = Settings::index("FH_HEAP_SIZE").unwrap();
        let c = Settings::resolve(&[], |n| (n == "FH_HEAP_SIZE").then(|| "4M".into())).unwrap();
        let h = |c: &Settings| {
            c.agreement()
                .into_iter()
                .find(|&(i, _)| i == heap)
                .unwrap()
                .1
        };
        assert_ne!(h(&d), h(&c));
        let v = Settings::resolve(&[], |n| (n == "FH_VERBOSE").then(|| "1".into())).unwrap();
        assert_eq!(
            d.agreement(),
            v.agreement(),
            "FH_VERBOSE may differ per rank"
        );
    }

    #[test]
    fn bad_environment_values_name_the_variable() {
        let e = Settings::resolve(&[], |n| (n == "FH_PROGRESS").then(|| "sometimes".into()))
            .unwrap_err();
        assert_eq!(e.status, Status::InvalidArg);
        assert!(e.msg.contains("FH_PROGRESS"), "{}", e.msg);
        let e =
            Settings::resolve(&[], |n| (n == "FH_HEAP_SIZE").then(|| "lots".into())).unwrap_err();
        assert!(e.msg.contains("FH_HEAP_SIZE"), "{}", e.msg);
        let e =
            Settings::resolve(&[], |n| (n == "FH_AM_MAX_LONG").then(|| "1K".into())).unwrap_err();
        assert!(e.msg.contains("FH_AM_MAX_LONG"), "{}", e.msg);
    }

    #[test]
    fn owned_groups_parse_their_own_variables() {
        let c = Settings::resolve(&[], |n| match n {
            "FH_FIREHOSE_MODE" => Some("page".into()),
            "FH_BARRIER" => Some("tree".into()),
            "FH_FIREHOSE_MAXREGION_SIZE" => Some("1024K".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(
            c.firehose.mode,
            Some(crate::firehose::settings::FhMode::Page)
        );
        assert_eq!(c.sync.barrier, crate::api::sync::settings::Algo::Tree);
        let i = Settings::index("FH_FIREHOSE_MAXREGION_SIZE").unwrap();
        assert_eq!(c.show(i), "1M", "shown in one canonical form");
        assert_eq!(c.sources[i], Source::Env);
        for (var, bad) in [("FH_FIREHOSE_MODE", "pages"), ("FH_BARRIER", "ring")] {
            let e = Settings::resolve(&[], |n| (n == var).then(|| bad.into())).unwrap_err();
            assert!(e.msg.contains(var), "{}", e.msg);
        }
        assert!(c.render().contains("FH_BARRIER"));
    }
}
