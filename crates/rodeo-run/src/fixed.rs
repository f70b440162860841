//! What `PUT /api/config` can never change: the fields that start processes, say where the
//! partition listens, or name places outside the output directory come only from the file the
//! service was started with (and its command line). A token that changes the next run's
//! configuration must not become a way to run a command or to write or read anywhere on the
//! host.
//!
//! | fields | rule |
//! |---|---|
//! | `control.ssh`, `control.remote_rodeo`, `[hosts]` | start processes (here or on other hosts): fixed |
//! | `control.http`, `control.address`, `transport.host`, `ros.listen`, `l1.external_listen`, `monitoring.endpoint`, `monitoring.input` | where the partition listens (an `ipc://` endpoint is also a file): fixed |
//! | `run.output` | the output directory (its lock, its run database): fixed |
//! | `transport.curve`, `transport.trusted_network` | whether the partition's peers authenticate: fixed (a token must not turn CURVE or TLS off) |
//! | `control.token`, `control.expert_token` | fixed; `"(hidden)"`, as `GET /api/config` shows them, keeps them |
//! | `logger.directories`, `ros.replay_files`, `ros.link_files` | places written or read: each entry inside the output directory, or one the file named |
//!
//! A fixed field the body leaves out keeps the service's value; one it names must equal it, or
//! the change is refused (400) naming the field, before anything is built or run.

use std::collections::BTreeMap;
use std::path::Path;

use rodeo_control::config::{output_entry_of, resolve_path, PartitionConfig};

/// A change `PUT /api/config` may not make (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "configuration field `{field}` cannot be changed over HTTP: {why}; it comes only from the \
     file the service was started with (restart the service with a new file to change it)"
)]
pub struct FixedFieldError {
    /// The field, as `section.name`.
    pub field: &'static str,
    /// What was asked.
    pub why: String,
}

/// Checks `new` (parsed from a `PUT /api/config` body whose top-level tables are `named`)
/// against `started`, the service's own configuration, and gives every fixed field the
/// service's value. `output` is the service's output directory.
pub fn keep_fixed_fields(
    started: &PartitionConfig,
    new: &mut PartitionConfig,
    named: &toml::Table,
    output: &Path,
) -> Result<(), FixedFieldError> {
    let s = started;
    let has = |field: &str| names(named, field);
    keep(
        "control.ssh",
        has("control.ssh"),
        &s.control.ssh,
        &mut new.control.ssh,
    )?;
    keep(
        "control.remote_rodeo",
        has("control.remote_rodeo"),
        &s.control.remote_rodeo,
        &mut new.control.remote_rodeo,
    )?;
    keep_hosts(has("hosts"), &s.hosts, &mut new.hosts)?;
    keep(
        "run.output",
        has("run.output"),
        &s.run.output,
        &mut new.run.output,
    )?;
    keep(
        "control.http",
        has("control.http"),
        &s.control.http,
        &mut new.control.http,
    )?;
    keep(
        "control.address",
        has("control.address"),
        &s.control.address,
        &mut new.control.address,
    )?;
    keep(
        "transport.host",
        has("transport.host"),
        &s.transport.host,
        &mut new.transport.host,
    )?;
    keep(
        "transport.curve",
        has("transport.curve"),
        &s.transport.curve,
        &mut new.transport.curve,
    )?;
    keep(
        "transport.trusted_network",
        has("transport.trusted_network"),
        &s.transport.trusted_network,
        &mut new.transport.trusted_network,
    )?;
    keep(
        "ros.listen",
        has("ros.listen"),
        &s.ros.listen,
        &mut new.ros.listen,
    )?;
    keep(
        "l1.external_listen",
        has("l1.external_listen"),
        &s.l1.external_listen,
        &mut new.l1.external_listen,
    )?;
    keep(
        "monitoring.endpoint",
        has("monitoring.endpoint"),
        &s.monitoring.endpoint,
        &mut new.monitoring.endpoint,
    )?;
    keep(
        "monitoring.input",
        has("monitoring.input"),
        &s.monitoring.input,
        &mut new.monitoring.input,
    )?;
    for (field, started, new) in [
        ("control.token", &s.control.token, &mut new.control.token),
        (
            "control.expert_token",
            &s.control.expert_token,
            &mut new.control.expert_token,
        ),
    ] {
        keep_token(field, has(field), started, new)?;
    }
    let root = resolve_path(output);
    for (field, old, new) in [
        (
            "logger.directories",
            &s.logger.directories,
            &mut new.logger.directories,
        ),
        (
            "ros.replay_files",
            &s.ros.replay_files,
            &mut new.ros.replay_files,
        ),
        ("ros.link_files", &s.ros.link_files, &mut new.ros.link_files),
    ] {
        if !has(field) {
            new.clone_from(old);
            continue;
        }
        for entry in new.iter() {
            if old.contains(entry) {
                continue;
            }
            let at = resolve_path(Path::new(entry));
            if !at.starts_with(&root) {
                return Err(FixedFieldError {
                    field,
                    why: format!(
                        "entry {entry:?} is {}, outside the output directory {} (an entry \
                         inside it, or one the file named, is accepted)",
                        at.display(),
                        root.display()
                    ),
                });
            }
            if let Some(own) = output_entry_of(&root, &at).filter(|_| field == "logger.directories")
            {
                return Err(FixedFieldError {
                    field,
                    why: format!(
                        "entry {entry:?} is in {own}, one of the service's own entries (its \
                         run database `runs.sqlite*`, its lock, its run directories `run-*`, \
                         which each run makes anew); give a directory of its own inside the \
                         output directory, e.g. {}",
                        root.join("data").display()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Whether the body's tables name `field` (`section.name`, or a top-level `hosts`).
fn names(named: &toml::Table, field: &str) -> bool {
    match field.split_once('.') {
        Some((section, key)) => named
            .get(section)
            .and_then(toml::Value::as_table)
            .is_some_and(|t| t.contains_key(key)),
        None => named.contains_key(field),
    }
}

/// A fixed field: named, it must equal the service's value; either way it gets it.
fn keep<T: PartialEq + Clone + std::fmt::Debug>(
    field: &'static str,
    named: bool,
    started: &T,
    new: &mut T,
) -> Result<(), FixedFieldError> {
    if named && new != started {
        return Err(FixedFieldError {
            field,
            why: format!("{new:?} asked, the service has {started:?}"),
        });
    }
    new.clone_from(started);
    Ok(())
}

/// `[hosts]`: where applications are started over ssh.
fn keep_hosts(
    named: bool,
    started: &BTreeMap<String, String>,
    new: &mut BTreeMap<String, String>,
) -> Result<(), FixedFieldError> {
    if named && new != started {
        return Err(FixedFieldError {
            field: "hosts",
            why: format!(
                "{} application(s) placed on other hosts asked, the service has {}",
                new.len(),
                started.len()
            ),
        });
    }
    new.clone_from(started);
    Ok(())
}

/// A token: left out, `"(hidden)"` (as served) or the same value keeps it; no value is
/// echoed.
fn keep_token(
    field: &'static str,
    named: bool,
    started: &str,
    new: &mut String,
) -> Result<(), FixedFieldError> {
    if named && new != rodeo_control::config::HIDDEN_TOKEN && new != started {
        return Err(FixedFieldError {
            field,
            why: "a token is set by the service's file or environment (RODEO_TOKEN, \
                  RODEO_EXPERT_TOKEN), never over HTTP; send \"(hidden)\" to keep it"
                .into(),
        });
    }
    *new = started.to_string();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (PartitionConfig, toml::Table) {
        (toml::from_str(text).unwrap(), toml::from_str(text).unwrap())
    }

    fn started(out: &Path) -> PartitionConfig {
        let mut c = PartitionConfig::default();
        c.run.output = out.display().to_string();
        c.control.token = "op".into();
        c.ros.replay_files = vec!["/data/a.data".into()];
        c
    }

    #[test]
    fn fields_that_start_processes_or_listen_are_refused_by_name_and_kept_when_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let s = started(dir.path());
        for (body, field) in [
            (
                "[control]\nssh = [\"/bin/sh\", \"-c\", \"id\"]\n",
                "control.ssh",
            ),
            (
                "[control]\nremote_rodeo = \"/tmp/x\"\n",
                "control.remote_rodeo",
            ),
            ("[hosts]\n\"dcm-1\" = \"10.0.0.9\"\n", "hosts"),
            ("[run]\noutput = \"/elsewhere\"\n", "run.output"),
            ("[control]\nhttp = \"0.0.0.0:80\"\n", "control.http"),
            ("[control]\naddress = \"0.0.0.0\"\n", "control.address"),
            ("[transport]\nhost = \"0.0.0.0\"\n", "transport.host"),
            ("[transport]\ncurve = false\n", "transport.curve"),
            (
                "[transport]\ntrusted_network = true\n",
                "transport.trusted_network",
            ),
            ("[ros]\nlisten = [\"tcp://0.0.0.0:1\"]\n", "ros.listen"),
            (
                "[l1]\nexternal_listen = \"tcp://0.0.0.0:2\"\n",
                "l1.external_listen",
            ),
            (
                "[monitoring]\nendpoint = \"ipc:///etc/x\"\n",
                "monitoring.endpoint",
            ),
            (
                "[monitoring]\ninput = \"tcp://0.0.0.0:3\"\n",
                "monitoring.input",
            ),
            ("[control]\ntoken = \"mine\"\n", "control.token"),
            (
                "[control]\nexpert_token = \"mine\"\n",
                "control.expert_token",
            ),
        ] {
            let (mut new, named) = parse(body);
            let e = keep_fixed_fields(&s, &mut new, &named, dir.path()).unwrap_err();
            assert_eq!(e.field, field, "{body}");
            assert!(e.to_string().contains(&format!("`{field}`")), "{e}");
            assert!(!e.to_string().contains("\"op\""), "no token shown: {e}");
        }
        // Left out, or named with the service's value: kept.
        let body = format!(
            "[run]\noutput = {:?}\n[control]\ntoken = \"(hidden)\"\n[dcm]\nslots = 8\n",
            s.run.output
        );
        let (mut new, named) = parse(&body);
        keep_fixed_fields(&s, &mut new, &named, dir.path()).unwrap();
        assert_eq!(new.control.token, "op");
        assert_eq!(new.dcm.slots, 8);
        assert_eq!(new.ros.replay_files, s.ros.replay_files, "left out: kept");
        assert_eq!(new.control.ssh, s.control.ssh);
    }

    #[test]
    fn paths_must_stay_inside_the_output_directory_or_be_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::os::unix::fs::symlink("/etc", out.join("link")).unwrap();
        let s = started(&out);
        let inside = out.join("disk2").display().to_string();
        for (field, entries, ok) in [
            ("logger.directories", vec![inside.clone()], true),
            (
                "logger.directories",
                vec![format!("{}/../../elsewhere", out.display())],
                false,
            ),
            (
                "logger.directories",
                vec![format!("{}/link/x", out.display())],
                false,
            ),
            ("logger.directories", vec!["/tmp".to_string()], false),
            ("ros.replay_files", vec!["/data/a.data".to_string()], true),
            ("ros.replay_files", vec!["/etc/shadow".to_string()], false),
            ("ros.link_files", vec![format!("{inside}/l.link")], true),
            (
                "ros.link_files",
                vec!["/root/.ssh/id_rsa".to_string()],
                false,
            ),
        ] {
            let (section, key) = field.split_once('.').unwrap();
            let body = format!("[{section}]\n{key} = {entries:?}\n");
            let (mut new, named) = parse(&body);
            let r = keep_fixed_fields(&s, &mut new, &named, &out);
            assert_eq!(r.is_ok(), ok, "{body}: {r:?}");
            if let Err(e) = r {
                assert_eq!(e.field, field);
                assert!(
                    e.to_string().contains("outside the output directory"),
                    "{e}"
                );
            }
        }
        // A run directory of the service's, a place in one, its run database's journals:
        // refused for the loggers.
        for run in [
            "run-00000003",
            "run-00000001/x",
            "runs.sqlite-journal",
            ".rodeo.lock",
        ] {
            let body = format!("[logger]\ndirectories = [{:?}]\n", out.join(run));
            let (mut new, named) = parse(&body);
            let e = keep_fixed_fields(&s, &mut new, &named, &out).unwrap_err();
            assert_eq!(e.field, "logger.directories");
            assert!(
                e.to_string().contains("one of the service's own entries"),
                "{e}"
            );
        }
    }
}
