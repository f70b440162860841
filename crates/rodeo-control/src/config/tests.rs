//! Tests of `config`: the commented default (`default.toml`), parsing, and `validate` naming
//! fields.

use super::*;

#[test]
fn the_commented_default_is_the_built_in_default() {
    // `DEFAULT_TOML` is `default.toml`: every field it sets is the built-in default's.
    let parsed = PartitionConfig::from_toml(DEFAULT_TOML, "default").unwrap();
    assert_eq!(parsed, PartitionConfig::default());
    assert_eq!(
        PartitionConfig::from_toml("", "empty").unwrap(),
        PartitionConfig::default()
    );
}

#[test]
fn the_default_shows_monitoring_and_alarms_that_parse_when_uncommented() {
    assert!(DEFAULT_TOML.contains("\n[monitoring]\n"), "{DEFAULT_TOML}");
    let start = DEFAULT_TOML
        .find("# [[alarms]]")
        .expect("an example [[alarms]]");
    let example: String = DEFAULT_TOML[start..]
        .lines()
        .map(|l| l.strip_prefix("# ").or(l.strip_prefix('#')).unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let parsed = PartitionConfig::from_toml(&example, "example").unwrap();
    assert_eq!(parsed.alarms.len(), 2, "{example}");
}

#[test]
fn unknown_fields_and_bad_values_name_the_field() {
    let e = PartitionConfig::from_toml("[dcm]\nslotz = 3\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("slotz") && e.contains("t.toml"), "{e}");
    let e = PartitionConfig::from_toml("[dcm]\nslots = 0\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("dcm.slots") && e.contains("= 0") && e.contains("1..=4096"),
        "{e}"
    );
    let e = PartitionConfig::from_toml("[dcm]\nchecksum = \"md5\"\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("md5") && e.contains("adler32"), "{e}");
    // No end condition: refused where nobody can stop the run, accepted when served.
    let endless = PartitionConfig::from_toml("[run]\nevents = 0\n", "t.toml").unwrap();
    let e = endless.check_ends_by_itself().unwrap_err().to_string();
    assert!(e.contains("run.events") && e.contains("until stop"), "{e}");
    let served = PartitionConfig::from_toml(
        "[run]\nevents = 0\n[control]\nhttp = \"127.0.0.1:0\"\n",
        "t.toml",
    )
    .unwrap();
    assert!(served.check_ends_by_itself().is_ok());
}

#[test]
fn the_ros_input_and_elinks_parse_and_are_checked() {
    assert_eq!(PartitionConfig::default().ros.input, RosInput::Dma);
    let c = PartitionConfig::from_toml("[ros]\ninput = \"swrod\"\nelinks = 8\n", "t.toml").unwrap();
    assert_eq!((c.ros.input, c.ros.elinks), (RosInput::Swrod, 8));
    let again = PartitionConfig::from_toml(&c.to_toml(), "again").unwrap();
    assert_eq!(again.ros, c.ros);
    let e = PartitionConfig::from_toml("[ros]\ninput = \"felix\"\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("input") && e.contains("felix") && e.contains("swrod"),
        "{e}"
    );
    for bad in ["0", "2049"] {
        let e = PartitionConfig::from_toml(&format!("[ros]\nelinks = {bad}\n"), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ros.elinks") && e.contains(&format!("= {bad}")) && e.contains("1..=2048"),
            "{e}"
        );
    }
    // With the SW ROD input: at least one payload word per E-link, and an L1ID cycle that
    // holds the builder's window; the same values are fine for the DMA input.
    let swrod = |extra: &str| {
        PartitionConfig::from_toml(
            &format!("[ros]\ninput = \"swrod\"\nfragment_words = 200\n{extra}"),
            "t.toml",
        )
    };
    let e = swrod("elinks = 50\n").unwrap_err().to_string();
    assert!(
        e.contains("ros.elinks") && e.contains("fragment_words / 5"),
        "{e}"
    );
    assert!(swrod("elinks = 40\n").is_ok());
    let e = swrod("[l1]\nl1id_wrap = 4\n").unwrap_err().to_string();
    assert!(e.contains("l1.l1id_wrap") && e.contains("swrod"), "{e}");
    // The same values with the DMA input (and few enough L1IDs alive for a wrap of 4).
    assert!(PartitionConfig::from_toml(
        "[ros]\nelinks = 50\npages_per_channel = 64\n[l1]\nl1id_wrap = 4\n[dcm]\nslots = 64\n",
        "t.toml"
    )
    .is_ok());
}

/// A wrap whose half extended-L1ID cycle (`l1id_wrap x 128`) does not exceed the L1IDs alive
/// (the fragments a channel holds ahead of the L1, or the events in flight, + a clear group)
/// is refused, naming the wrap and the smallest one that would do; a smaller store makes the
/// same wrap fine.
#[test]
fn the_l1id_cycle_must_hold_the_l1ids_alive() {
    let parse = |text: &str| PartitionConfig::from_toml(text, "t.toml");
    // Default: 2,044 fragments a channel + 100 = 2,144 alive; a wrap of 16 gives 2,048.
    let e = parse("[l1]\nl1id_wrap = 16\n").unwrap_err().to_string();
    assert!(
        e.contains("l1.l1id_wrap") && e.contains("2144 L1IDs") && e.contains("at least 17"),
        "{e}"
    );
    assert!(parse("[l1]\nl1id_wrap = 17\n").is_ok());
    // 160 pages hold 636 fragments: 736 alive, a wrap of 6 (768) does, 5 (640) does not.
    assert!(parse("[l1]\nl1id_wrap = 6\n[ros]\npages_per_channel = 160\n").is_ok());
    assert!(parse("[l1]\nl1id_wrap = 5\n[ros]\npages_per_channel = 160\n").is_err());
    // A wrap of 1 (every L1ID 0, only the ECR counts): 128 L1IDs alive at most.
    let small = "[ros]\npages_per_channel = 16\n[dcm]\nslots = 8\n[supervisor]\nclear_group = 50\n";
    assert!(parse(&format!("[l1]\nl1id_wrap = 1\n{small}")).is_ok());
    // A value already refused on its own is not named twice.
    let e = parse("[l1]\nl1id_wrap = 0\n").unwrap_err();
    assert_eq!(e.errors().len(), 1, "{e}");
}

#[test]
fn the_public_toml_hides_the_token() {
    let mut c = PartitionConfig::default();
    assert!(!c.to_toml_public().contains("(hidden)"));
    c.control.token = "s3cret".into();
    c.control.expert_token = "3xpert".into();
    let t = c.to_toml_public();
    assert!(
        !t.contains("s3cret") && t.contains("token = \"(hidden)\""),
        "{t}"
    );
    assert!(
        !t.contains("3xpert") && t.contains("expert_token = \"(hidden)\""),
        "{t}"
    );
    assert!(c.to_toml().contains("s3cret") && c.to_toml().contains("3xpert"));
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("s3cret") && !shown.contains("3xpert"),
        "{shown}"
    );
    c.control.expert_token = "s3cret".into();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("control.expert_token"), "{e}");
}

#[test]
fn hosts_need_tcp_and_known_names() {
    let e = PartitionConfig::from_toml("[hosts]\n\"dcm-1\" = \"10.200.0.2\"\n", "h.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("transport.kind") && e.contains("tcp"), "{e}");
    let e = PartitionConfig::from_toml(
        "[transport]\nkind = \"tcp\"\n[hosts]\n\"dcm-9\" = \"10.200.0.2\"\n",
        "h.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("hosts") && e.contains("dcm-9"), "{e}");
    let c = PartitionConfig::from_toml(
        "[transport]\nkind = \"tcp\"\n[hosts]\n\"dcm-1\" = \"10.200.0.2\"\n",
        "h.toml",
    )
    .unwrap();
    assert_eq!(c.hosts["dcm-1"], "10.200.0.2");
    assert_eq!(PartitionConfig::from_toml(&c.to_toml(), "x").unwrap(), c);
    let e = PartitionConfig::from_toml("[control]\ndead_after_ms = 100\n", "h.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("control.dead_after_ms"), "{e}");
}

#[test]
fn the_replay_input_parses_and_is_checked() {
    let c = PartitionConfig::from_toml(
        "[ros]\ninput = \"replay\"\nreplay_files = [\"a.data\"]\nreplay_l1id = \"keep\"\n\
         replay_loop = true\nreplay_source_map = [[0xA10001, 0x410000]]\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.ros.input, RosInput::Replay);
    assert_eq!(c.ros.replay_l1id, ReplayL1id::Keep);
    assert_eq!(c.ros.replay_source_map, [[0xA1_0001, 0x41_0000]]);
    assert_eq!(PartitionConfig::from_toml(&c.to_toml(), "x").unwrap(), c);
    let e = PartitionConfig::from_toml("[ros]\ninput = \"replay\"\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("ros.replay_files"), "{e}");
    for map in ["[[1, 2], [1, 3]]", "[[1, 2, 7]]", "[[1]]"] {
        let e = PartitionConfig::from_toml(&format!("[ros]\nreplay_source_map = {map}\n"), "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ros.replay_source_map"), "{map}: {e}");
    }
}

#[test]
fn the_logger_format_and_its_codecs() {
    assert_eq!(PartitionConfig::default().logger.format, FormatName::Rodeo);
    let c = PartitionConfig::from_toml(
        "[logger]\nformat = \"eventstorage\"\ncompression = \"zlib\"\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(
        (c.logger.format, c.logger.compression),
        (FormatName::Eventstorage, CompressionName::Zlib)
    );
    assert_eq!(PartitionConfig::from_toml(&c.to_toml(), "x").unwrap(), c);
    let e = PartitionConfig::from_toml(
        "[logger]\nformat = \"eventstorage\"\ncompression = \"zstd\"\n",
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("logger.compression") && e.contains("zstd") && e.contains("zlib"),
        "{e}"
    );
    let e = PartitionConfig::from_toml("[logger]\ncompression = \"zlib\"\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("logger.compression") && e.contains("eventstorage"),
        "{e}"
    );
    let e = PartitionConfig::from_toml(
        "[logger]\nformat = \"eventstorage\"\nstreams = [\"phys.ics\"]\n",
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("logger.streams") && e.contains("phys.ics"),
        "{e}"
    );
    let e = PartitionConfig::from_toml("[logger]\nformat = \"root\"\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("root") && e.contains("eventstorage"), "{e}");
}

#[test]
fn toml_round_trip() {
    let mut c = PartitionConfig::default();
    c.dcm.slots = 7;
    c.transport.kind = TransportKind::Ipc;
    assert_eq!(PartitionConfig::from_toml(&c.to_toml(), "x").unwrap(), c);
}

#[test]
fn stream_names_that_would_escape_or_break_file_names_are_refused() {
    for bad in ["../../etc", ".hidden", "a/b", "a.b", "", "x y", "é"] {
        let text = format!("[logger]\nstreams = [{bad:?}]\n");
        let e = PartitionConfig::from_toml(&text, "s.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("logger.streams"), "{bad:?}: {e}");
    }
    let c = PartitionConfig::from_toml(
        "[logger]\nstreams = [\"physics_Main\", \"calibration-1\"]\n",
        "s.toml",
    )
    .unwrap();
    assert_eq!(c.logger.streams.len(), 2);
}

#[test]
fn network_and_file_inputs_and_the_data_driven_l1_are_checked() {
    let err = |t: &str| {
        PartitionConfig::from_toml(t, "t.toml")
            .and_then(|c| c.check_ends_by_itself())
            .unwrap_err()
            .to_string()
    };
    let ok = |t: &str| {
        let c = PartitionConfig::from_toml(t, "t.toml").unwrap();
        c.check_ends_by_itself().unwrap();
        c
    };
    let net = "[ros]\nchannels = 2\ninput = \"network\"\n";
    let e = err(&format!("{net}listen = [\"tcp://127.0.0.1:5000\"]\n"));
    assert!(
        e.contains("ros.listen") && e.contains("one address per ROB"),
        "{e}"
    );
    let e = err(&format!(
        "{net}listen = [\"tcp://127.0.0.1:5000\", \"http://x:1\"]\n"
    ));
    assert!(e.contains("ros.listen") && e.contains("http://x:1"), "{e}");
    let e = err(&format!(
        "{net}listen = [\"tcp://127.0.0.1:5000\", \"udp://127.0.0.1:5001\"]\nlisten_mode = \"felix\"\n"
    ));
    assert!(e.contains("ros.listen_mode"), "{e}");
    let e = err("[ros]\nchannels = 2\ninput = \"file\"\nlink_files = [\"a\"]\n");
    assert!(e.contains("ros.link_files"), "{e}");
    // A looping capture with the data-driven L1 built one pass, then nothing.
    let looped = "[run]\nseconds = 5\n[l1]\nmode = \"readout\"\n[ros]\nchannels = 1\n\
                  input = \"file\"\nlink_files = [\"a\"]\nlink_loop = true\n";
    assert!(err(looped).contains("ros.link_loop"));
    ok(&looped.replace("link_loop = true", "link_loop = false"));
    // With the L1 emulator every event past the capture's L1IDs was partial.
    let emulated = looped.replace("mode = \"readout\"", "mode = \"emulator\"");
    assert!(err(&emulated).contains("ros.link_loop"), "{emulated}");
    // With another input it looped nothing and passed without a word.
    let e = err("[run]\nevents = 10\n[ros]\ninput = \"dma\"\nlink_loop = true\n");
    assert!(
        e.contains("ros.link_loop") && e.contains("leave it out"),
        "{e}"
    );
    // A data-driven run over inputs that end may have neither events nor seconds...
    let tcp = format!(
        "[run]\nevents = 0\n[l1]\nmode = \"readout\"\n{net}\
         listen = [\"tcp://127.0.0.1:5000\", \"tcp://127.0.0.1:5001\"]\n"
    );
    assert_eq!(ok(&tcp).l1.mode, L1Mode::Readout);
    // ...but not over UDP (it never ends) or with the emulator.
    let e = err(&tcp.replace("tcp://127.0.0.1:5001", "udp://127.0.0.1:5001"));
    assert!(e.contains("run.events") && e.contains("readout"), "{e}");
    let e = err(&tcp.replace("mode = \"readout\"", "mode = \"emulator\""));
    assert!(e.contains("run.events"), "{e}");
}

#[test]
fn the_external_l1_needs_a_tcp_address_and_may_run_without_limits() {
    let ok = PartitionConfig::from_toml(
        "[run]\nevents = 0\n[l1]\nmode = \"external\"\nexternal_listen = \"tcp://127.0.0.1:5000\"\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(ok.l1.mode, L1Mode::External);
    let e = PartitionConfig::from_toml(
        "[l1]\nmode = \"external\"\nexternal_listen = \"udp://127.0.0.1:5000\"\n",
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("l1.external_listen"), "{e}");
}

#[test]
fn output_directories_and_margins_are_checked_naming_the_field() {
    let err = |t: &str| {
        PartitionConfig::from_toml(t, "t.toml")
            .unwrap_err()
            .to_string()
    };
    let e = err("[logger]\nmin_free_fraction = 1.5\n");
    assert!(e.contains("logger.min_free_fraction"), "{e}");
    for twice in ["\"/a\", \"/a\"", "\"d\", \"./d/\""] {
        let e = err(&format!("[logger]\ndirectories = [{twice}]\n"));
        assert!(
            e.contains("logger.directories") && e.contains("twice"),
            "{e}"
        );
    }
    let e = err("[logger]\ndirectories = [\"\"]\n");
    assert!(e.contains("logger.directories"), "{e}");
    // On this host: an entry under a plain file cannot take files; a new path under a
    // writable directory can (the run makes it).
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let good = t.path().join("new/disk");
    let c = PartitionConfig::from_toml(
        &format!(
            "[logger]\ndirectories = [{:?}, {:?}]\n",
            good.display().to_string(),
            file.join("sub").display().to_string()
        ),
        "t.toml",
    )
    .unwrap();
    let e = c.check_directories().unwrap_err().to_string();
    assert!(
        e.contains("logger.directories") && e.contains("plain") && e.contains("not a directory"),
        "{e}"
    );
    let c = PartitionConfig::from_toml(
        &format!(
            "[logger]\ndirectories = [{:?}]\n",
            good.display().to_string()
        ),
        "t.toml",
    )
    .unwrap();
    c.check_directories().unwrap();
}

/// A margin of free space that no output directory has left is refused on this host, naming
/// the field that set the margin and each directory with its free bytes; one directory with
/// room is enough, and loggers on other hosts are not measured here.
#[test]
fn a_margin_larger_than_the_free_space_is_refused_on_this_host() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("not-yet/out");
    let cfg = |extra: &str| {
        PartitionConfig::from_toml(
            &format!("[run]\noutput = {:?}\n{extra}", out.display().to_string()),
            "t.toml",
        )
        .unwrap()
    };
    // The default margin (64 MiB) on the test's disk; the path is made by the run.
    cfg("").check_free_space().unwrap();
    let e = cfg("[logger]\nmin_free_bytes = 9223372036854775807\n")
        .check_free_space()
        .unwrap_err()
        .to_string();
    let here = t.path().display().to_string();
    assert!(
        e.contains("logger.min_free_bytes")
            && e.contains(&format!("{:?} has ", out.display().to_string()))
            && e.contains(&format!("measured at {here} "))
            && e.contains("bytes free of"),
        "{e}"
    );
    // The fraction sets the margin when it is the larger.
    let e = cfg("[logger]\nmin_free_bytes = 0\nmin_free_fraction = 0.9999999\n")
        .check_free_space()
        .unwrap_err()
        .to_string();
    assert!(e.contains("logger.min_free_fraction"), "{e}");
    // The loggers' directories instead of run.output; the first may be full if another has
    // room, which a margin as large as the disk never leaves.
    let dirs = format!(
        "[logger]\ndirectories = [{:?}, {:?}]\n",
        here,
        t.path().join("b").display().to_string()
    );
    cfg(&dirs).check_free_space().unwrap();
    let e = cfg(&format!("{dirs}min_free_bytes = 9223372036854775807\n"))
        .check_free_space()
        .unwrap_err()
        .to_string();
    assert_eq!(e.matches(" bytes free of ").count(), 2, "{e}");
    // The loggers elsewhere: their disks are not this host's.
    let remote = cfg(
        "[logger]\nmin_free_bytes = 9223372036854775807\n[transport]\nkind = \"tcp\"\n\
         [hosts]\n\"logger-1\" = \"10.0.0.2\"\n",
    );
    remote.check_free_space().unwrap();
    // A fraction out of range is left to `validate` (no margin measured from it).
    for fraction in [1.5, f64::NAN] {
        let mut c = cfg("[logger]\nmin_free_bytes = 0\n");
        c.logger.min_free_fraction = fraction;
        c.check_free_space().unwrap();
    }
    // `check_here` (what `PUT /api/config` asks) refuses it too.
    assert!(cfg("[logger]\nmin_free_bytes = 9223372036854775807\n")
        .check_here()
        .is_err());
}

#[test]
fn the_restart_policy_parses_and_bad_values_name_the_field() {
    let c = PartitionConfig::from_toml(
        "[control]\nrestart = false\nmax_restarts_per_run = 7\nrestart_backoff_ms = 20\n",
        "r.toml",
    )
    .unwrap();
    assert!(!c.control.restart);
    assert_eq!(c.control.max_restarts_per_run, 7);
    assert_eq!(c.control.restart_backoff_ms, 20);
    assert!(PartitionConfig::default().control.restart);
    for (text, field) in [
        (
            "[control]\nmax_restarts_per_run = 5000\n",
            "control.max_restarts_per_run",
        ),
        (
            "[control]\nrestart_backoff_ms = 9999999\n",
            "control.restart_backoff_ms",
        ),
        ("[control]\nrestart = 3\n", "restart"),
    ] {
        let e = PartitionConfig::from_toml(text, "r.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{text}: {e}");
    }
}

#[test]
fn high_water_marks_come_from_the_file_and_bad_ones_name_the_field() {
    let c = PartitionConfig::from_toml(
        "[transport]\nhigh_water_mark = 500\n[ros]\nhigh_water_mark = 70\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(
        (c.transport.high_water_mark, c.ros.high_water_mark),
        (500, 70)
    );
    let d = PartitionConfig::default();
    assert_eq!(
        (d.transport.high_water_mark, d.ros.high_water_mark),
        (100_000, 10_000)
    );
    for (text, field) in [
        (
            "[transport]\nhigh_water_mark = 0\n",
            "transport.high_water_mark",
        ),
        ("[ros]\nhigh_water_mark = 20000000\n", "ros.high_water_mark"),
    ] {
        let e = PartitionConfig::from_toml(text, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(field) && e.contains("1..=10000000"), "{e}");
    }
}

#[test]
fn max_message_bytes_must_hold_the_partitions_largest_message_and_names_the_field() {
    let c = PartitionConfig::from_toml("[transport]\nmax_message_bytes = 16777216\n", "t.toml")
        .unwrap();
    assert_eq!(c.transport.max_message_bytes, 16 << 20);
    assert_eq!(PartitionConfig::default().transport.max_message_bytes, 0);
    // Default partition: 12 ROBs of 200 words, a full event of about 13 kB; 1 MB of
    // fragment words per ROB cannot fit in 1 MiB.
    for text in [
        "[transport]\nmax_message_bytes = 1000\n",
        "[transport]\nmax_message_bytes = 5000000000\n",
        "[transport]\nmax_message_bytes = 1048576\n[ros]\nfragment_words = 262144\n",
    ] {
        let e = PartitionConfig::from_toml(text, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("transport.max_message_bytes") && e.contains("needs"),
            "{text}: {e}"
        );
    }
    // Inputs whose fragments come from outside assume 1 MiB per ROB.
    let e = PartitionConfig::from_toml(
        "[transport]\nmax_message_bytes = 1048576\n[ros]\ninput = \"replay\"\n\
         replay_files = [\"x.data\"]\n",
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("transport.max_message_bytes"), "{e}");
}

#[test]
fn the_stream_transport_is_tls_unless_the_network_is_trusted_and_makes_stream_endpoints() {
    let c = PartitionConfig::from_toml("[transport]\nkind = \"stream\"\n", "s.toml").unwrap();
    assert!(c.transport.stream_tls() && c.transport.curve_enabled());
    // TLS keys travel with the CURVE keys: CURVE off needs a trusted network.
    let e = PartitionConfig::from_toml("[transport]\nkind = \"stream\"\ncurve = false\n", "s.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("transport.curve") && e.contains("trusted_network"),
        "{e}"
    );
    let plain = "[transport]\nkind = \"stream\"\ncurve = false\ntrusted_network = true\n";
    let c = PartitionConfig::from_toml(plain, "s.toml").unwrap();
    assert!(!c.transport.stream_tls());
    let text = "[transport]\nkind = \"stream\"\ntrusted_network = true\nbase_port = 47100\n\
                [hosts]\n\"dcm-1\" = \"10.200.0.2\"\n\"ros-1\" = \"10.200.0.1\"\n";
    let c = PartitionConfig::from_toml(text, "s.toml").unwrap();
    // Run control stays on ZeroMQ tcp, authenticated by default; the stream is plain.
    assert!(c.transport.curve_enabled() && !c.transport.stream_tls());
    assert_eq!(PartitionConfig::from_toml(&c.to_toml(), "x").unwrap(), c);
    let layout = crate::partition::Layout::new(&c);
    let eps = layout.endpoints();
    assert!(
        eps.iter().all(|(_, ep)| ep.starts_with("stream://")),
        "{eps:?}"
    );
    assert!(
        eps.iter()
            .any(|(n, ep)| n == "ros-1" && ep == "stream://10.200.0.1:47101"),
        "{eps:?}"
    );
}

#[test]
fn curve_defaults_to_on_for_tcp_only_and_a_bad_value_names_the_field() {
    let on = |text: &str| {
        PartitionConfig::from_toml(text, "t.toml")
            .unwrap()
            .transport
            .curve_enabled()
    };
    assert!(!on(""));
    assert!(!on("[transport]\nkind = \"shm\"\n"));
    assert!(on("[transport]\nkind = \"tcp\"\n"));
    assert!(!on("[transport]\nkind = \"tcp\"\ncurve = false\n"));
    // Explicitly on without tcp: the control channel (always tcp) authenticates.
    assert!(on("[transport]\nkind = \"shm\"\ncurve = true\n"));
    // Unset stays unset through the TOML handed to applications.
    let c = PartitionConfig::from_toml("[transport]\nkind = \"tcp\"\n", "t.toml").unwrap();
    assert_eq!(c.transport.curve, None);
    let back = PartitionConfig::from_toml(&c.to_toml(), "again").unwrap();
    assert_eq!(back.transport.curve, None);
    let e = PartitionConfig::from_toml("[transport]\ncurve = \"yes\"\n", "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("curve"), "{e}");
}

#[test]
fn the_output_path_is_checked_as_the_directories_are_naming_run_output() {
    // One writable-directory check serves `run.output` and `logger.directories`.
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let mut c = PartitionConfig::default();
    c.run.output = file.display().to_string();
    let e = c.check_output().unwrap_err().to_string();
    assert!(
        e.contains("run.output") && e.contains("exists and is not a directory"),
        "{e}"
    );
    c.run.output = file.join("sub").display().to_string();
    let e = c.check_output().unwrap_err().to_string();
    assert!(
        e.contains("run.output") && e.contains("a parent of the output path is not a directory"),
        "{e}"
    );
    c.run.output = t.path().join("new/run").display().to_string();
    c.check_output().unwrap();
}

/// `text` refused: the error, as text, and the fields it names.
fn refused(text: &str) -> (String, Vec<String>) {
    let e = PartitionConfig::from_toml(text, "t.toml").unwrap_err();
    (e.to_string(), e.fields())
}

#[test]
fn every_bad_value_of_a_file_is_named_at_once_one_per_line() {
    let (text, fields) = refused(
        "[run]\nseconds = -1.0\n[ros]\nnodes = 0\nfragment_words = 65536\n[dcm]\nslots = 0\n\
         processing_us = 1e300\n[l1]\nrate_hz = nan\n",
    );
    let mut sorted = fields.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "dcm.processing_us",
            "dcm.slots",
            "l1.rate_hz",
            "ros.fragment_words",
            "ros.nodes",
            "run.seconds",
        ],
        "{text}"
    );
    assert!(text.contains("= 1e300:"), "{text}");
    assert!(fields.len() >= 5, "{text}");
    assert_eq!(text.lines().count(), fields.len(), "{text}");
    for line in text.lines() {
        assert!(line.starts_with("configuration field `"), "{line}");
    }
}

#[test]
fn the_measured_cases_of_issue_36_are_refused_naming_field_and_limit() {
    // A fragment no DMA superpage holds: every event was written without its ROBs.
    let (e, f) = refused("[ros]\nfragment_words = 65536\n");
    assert_eq!(f, ["ros.fragment_words"]);
    assert!(e.contains("at most 65521") && e.contains("256 KiB"), "{e}");
    // A processing time that panicked the run (Duration::from_secs_f64), and its relatives.
    for v in ["1e300", "inf", "nan", "-1.0", "2e7"] {
        let (e, f) = refused(&format!("[dcm]\nprocessing_us = {v}\n"));
        assert_eq!(f, ["dcm.processing_us"], "{v}: {e}");
    }
    let (e, _) = refused("[dcm]\nprocessing_us = 4000000.0\n");
    assert!(e.contains("supervisor.event_timeout_ms"), "{e}");
    // A port past 65535 in a listen list, and port 0.
    let net = "[ros]\nchannels = 2\ninput = \"network\"\n";
    for port in [99_999, 0] {
        let (e, f) = refused(&format!(
            "{net}listen = [\"tcp://127.0.0.1:5000\", \"tcp://127.0.0.1:{port}\"]\n"
        ));
        assert_eq!(f, ["ros.listen"], "{e}");
        assert!(
            e.contains(&format!("port {port} is outside 1..=65535")),
            "{e}"
        );
    }
    let (e, _) =
        refused("[l1]\nmode = \"external\"\nexternal_listen = \"tcp://127.0.0.1:70000\"\n");
    assert!(
        e.contains("l1.external_listen") && e.contains("70000"),
        "{e}"
    );
    let (e, _) = refused("[control]\nhttp = \"127.0.0.1:99999\"\n");
    assert!(e.contains("control.http"), "{e}");
    // An alarm on a metric the partition does not have never fires.
    let (e, f) =
        refused("[[alarms]]\nname = \"x\"\nmetric = \"rodeo_l1_accept_total\"\nbelow = 1.0\n");
    assert_eq!(f, ["alarms.metric"]);
    assert!(e.contains("nearest: rodeo_l1_accepts_total"), "{e}");
    // 60 DCMs x 4096 slots: 245760 events in flight for channels holding 2044.
    let (e, f) = refused("[dcm]\nnodes = 60\nslots = 4096\n");
    assert_eq!(f, ["dcm.slots"]);
    assert!(
        e.contains("245760 events in flight") && e.contains("holds 2044 fragments of 222 words"),
        "{e}"
    );
    let c = PartitionConfig::from_toml("[dcm]\nnodes = 60\nslots = 34\n", "t.toml").unwrap();
    assert_eq!(c.events_in_flight(), 2040);
    // 32 nodes x 64 channels: about 10 GB (11 GB with superpages) and 228 busy threads,
    // refused on an 8 GiB, 2-core host (the measured one reached 3.9 GB in 12 s on this
    // 2-core machine).
    let c = PartitionConfig::from_toml(
        "[ros]\nnodes = 32\nchannels = 64\npages_per_channel = 1024\n",
        "t.toml",
    )
    .unwrap();
    let small = Machine {
        available_bytes: Some(8 << 30),
        total_bytes: Some(8 << 30),
        cpus: 2,
        cgroup_limit_bytes: None,
    };
    let e = c.check_here_on(&small).unwrap_err().to_string();
    assert!(e.contains("the partition needs 10.0 GB"), "{e}");
    let big = Machine {
        available_bytes: Some(64 << 30),
        ..small
    };
    let e = c.check_here_on(&big).unwrap_err().to_string();
    assert!(e.contains("228 busy threads on this host's 2 cores"), "{e}");
}

#[test]
fn alarms_name_metrics_the_partition_has_with_their_labels() {
    let ok = |metric: &str, extra: &str| {
        PartitionConfig::from_toml(
            &format!("{extra}[[alarms]]\nname = \"a\"\nmetric = '{metric}'\nabove = 0.0\n"),
            "t.toml",
        )
    };
    for m in [
        "l1_rate_hz",
        "disk_free_bytes",
        "rodeo_run_restarts",
        "rodeo_errors_total{kind=\"lost_fragment\"}",
        "rodeo_dcm_busy_slots{app=\"dcm-2\"}",
        "rodeo_decision_latency_seconds_count",
        "rodeo_decision_latency_seconds_bucket{le=\"0.001\"}",
        "rodeo_alarm_active{name=\"a\"}",
        "rodeo_http_responses_total{class=\"5xx\"}",
    ] {
        ok(m, "").unwrap_or_else(|e| panic!("{m}: {e}"));
    }
    for (m, words) in [
        ("rodeo_nothing", "no /metrics family rodeo_nothing"),
        ("rodeo_decision_latency_seconds", "is a histogram"),
        (
            "rodeo_dcm_busy_slots{app=\"dcm-3\"}",
            "app=\"dcm-3\" is none",
        ),
        ("rodeo_dcm_busy_slots{ap=\"dcm-1\"}", "has no label \"ap\""),
        ("l1_rate_hz{app=\"x\"}", "takes no labels"),
        ("rodeo_ros_swrod_fragments_total", "ros.input = \"swrod\""),
        ("rodeo_monitor_missed_total", "[monitoring]"),
    ] {
        let e = ok(m, "").unwrap_err().to_string();
        assert!(e.contains("alarms.metric") && e.contains(words), "{m}: {e}");
    }
    ok(
        "rodeo_ros_swrod_fragments_total",
        "[ros]\ninput = \"swrod\"\n",
    )
    .unwrap();
    ok(
        "rodeo_monitor_missed_total",
        "[monitoring]\nendpoint = \"tcp://127.0.0.1:5600\"\n",
    )
    .unwrap();
}

#[test]
fn timeouts_rates_and_fractions_have_ranges() {
    for (text, field) in [
        (
            "[supervisor]\nevent_timeout_ms = 18446744073709551615\n",
            "supervisor.event_timeout_ms",
        ),
        // Shorter than an event's ordinary latency on a busy host: its events come out
        // partial (20 ms did on a quiet one).
        (
            "[supervisor]\nevent_timeout_ms = 999\n",
            "supervisor.event_timeout_ms",
        ),
        (
            "[supervisor]\nevent_timeout_ms = 1\n",
            "supervisor.event_timeout_ms",
        ),
        (
            "[control]\ncommand_timeout_ms = 100000000000\n",
            "control.command_timeout_ms",
        ),
        (
            "[control]\ncommand_timeout_ms = 999\n",
            "control.command_timeout_ms",
        ),
        (
            "[control]\nspawn_timeout_ms = 1\n",
            "control.spawn_timeout_ms",
        ),
        (
            "[control]\ndead_after_ms = 100000000000\n",
            "control.dead_after_ms",
        ),
        (
            "[l1]\nroib_timeout_ms = 100000000000\n",
            "l1.roib_timeout_ms",
        ),
        ("[l1]\nrate_hz = 1e-300\n", "l1.rate_hz"),
        ("[l1]\nrate_hz = 1e300\n", "l1.rate_hz"),
        ("[ros]\nreplay_rate_hz = inf\n", "ros.replay_rate_hz"),
        ("[run]\nseconds = 1e300\n", "run.seconds"),
        ("[dcm]\naccept_fraction = nan\n", "dcm.accept_fraction"),
        (
            "[dcm]\nmax_outstanding = 18446744073709551615\n",
            "dcm.max_outstanding",
        ),
        (
            "[logger]\nmax_file_mib = 18446744073709551615\n",
            "logger.max_file_mib",
        ),
        (
            "[logger]\nmin_free_fraction = nan\n",
            "logger.min_free_fraction",
        ),
        (
            "[monitoring]\nendpoint = \"tcp://127.0.0.1:5600\"\nmax_rate_hz = inf\n",
            "monitoring.max_rate_hz",
        ),
        (
            "[monitoring]\nendpoint = \"tcp://127.0.0.1:5600\"\nfraction = nan\n",
            "monitoring.fraction",
        ),
        (
            "[[alarms]]\nname = \"a\"\nmetric = \"l1_rate_hz\"\nbelow = 1.0\nfor_seconds = 1e300\n",
            "alarms.for_seconds",
        ),
        (
            "[run]\nmemory_budget_bytes = 1000\n",
            "run.memory_budget_bytes",
        ),
        ("[transport]\nhost = \"a b\"\n", "transport.host"),
        (
            "[logger]\nstreams = [\"a\", \"b\", \"a\"]\n",
            "logger.streams",
        ),
        (
            "[hosts]\n\"dcm-1\" = \"10.0.0.1:22\"\n[transport]\nkind = \"tcp\"\n",
            "hosts",
        ),
    ] {
        let (e, f) = refused(text);
        assert!(f.iter().any(|x| x == field), "{text}: {e}");
    }
    // The shortest event timeout is accepted.
    PartitionConfig::from_toml("[supervisor]\nevent_timeout_ms = 1000\n", "t.toml").unwrap();
    // The SW ROD's largest packet: 16 KiB per E-link.
    let (e, f) = refused("[ros]\ninput = \"swrod\"\nelinks = 4\nfragment_words = 20000\n");
    assert_eq!(f, ["ros.fragment_words"]);
    assert!(
        e.contains("at most 16395") && e.contains("16384 bytes"),
        "{e}"
    );
    PartitionConfig::from_toml(
        "[ros]\ninput = \"swrod\"\nelinks = 4\nfragment_words = 16395\n[dcm]\nslots = 15\n",
        "t.toml",
    )
    .unwrap();
}

#[test]
fn the_run_words_are_checked_and_become_free_strings() {
    let c = PartitionConfig::from_toml(
        "[run]\ncomment = \"HV scan, 1500 V\"\nrun_type = \"calibration\"\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(
        c.run.words().free_strings(),
        ["Comment=HV scan, 1500 V", "RunType=calibration"]
    );
    let e = PartitionConfig::from_toml(
        "[run]\nrun_type = \"two words\"\nshifter = \"a\\u0007b\"\n",
        "t.toml",
    )
    .unwrap_err();
    assert_eq!(e.fields(), ["run.shifter", "run.run_type"], "{e}");
    let long = format!("[run]\ncomment = \"{}\"\n", "x".repeat(1001));
    let e = PartitionConfig::from_toml(&long, "t.toml").unwrap_err();
    assert_eq!(e.fields(), ["run.comment"], "{e}");
}

/// Every integer field of the commented default at the sizes TOML allows and past 32 bits:
/// `from_toml` accepts it or names the field, and never panics, wraps or makes something per
/// count on the way (`[dcm] nodes = 4294967297` made four billion application names before
/// refusing them, and a `PUT /api/config` of it took the service down), nor adds a second
/// error about a field it did not change (`[ros] nodes` out of range named `dcm.nodes` too).
/// Under a deadline: the sweep runs in its own thread.
#[test]
fn every_integer_field_at_any_size_is_refused_by_name_without_panic_or_allocation() {
    let sweep = std::thread::spawn(|| {
        let lines: Vec<&str> = DEFAULT_TOML.lines().collect();
        let mut tried = 0u32;
        let mut twice = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let Some((key, value)) = line.split_once(" = ") else {
                continue;
            };
            if !key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                || value.parse::<i64>().is_err()
            {
                continue;
            }
            for v in [i64::MAX, i64::MIN, (1 << 32) + 1, 1 << 31, -1, 0] {
                let mut text = lines.clone();
                let changed = format!("{key} = {v}");
                text[i] = &changed;
                if let Err(e) = PartitionConfig::from_toml(&text.join("\n"), "t.toml") {
                    // One value refused: one error, naming it (no second one about a field
                    // the operator did not touch).
                    let fields = e.fields();
                    let e = e.to_string();
                    assert!(e.contains(key), "{changed} (line {}): {e}", i + 1);
                    if fields.len() > 1 {
                        twice.push(format!("{changed} (line {}): {e}", i + 1));
                    }
                }
                tried += 1;
            }
        }
        (tried, twice)
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !sweep.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sweep of extreme values took over 120 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (tried, twice) = sweep.join().expect("the sweep panicked (message above)");
    assert!(
        twice.is_empty(),
        "more than one error:\n{}",
        twice.join("\n")
    );
    // 34 integer fields in the default of 2026-12-03, six values each.
    assert!(
        tried >= 200,
        "only {tried} values tried: the default has fewer integers?"
    );
}

#[test]
fn application_names_are_known_without_listing_them() {
    let mut c = PartitionConfig::default();
    for name in c.app_names() {
        assert!(c.is_app_name(&name), "{name}");
    }
    for name in [
        "dcm-0",
        "dcm-01",
        "dcm-3",
        "dcm-",
        "dcm--1",
        "ros",
        "x-1",
        "",
        "supervisor-1",
    ] {
        assert!(!c.is_app_name(name), "{name:?}");
    }
    c.dcm.nodes = usize::MAX;
    assert!(c.is_app_name(&format!("dcm-{}", usize::MAX)));
    assert!(!c.is_app_name("dcm-18446744073709551616"), "past usize");
}
