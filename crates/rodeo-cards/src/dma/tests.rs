//! Tests of the emulated DMA engine (moved out of `dma/mod.rs`).

use super::*;

/// Units of 16 little-endian u32: a running counter, so order and loss are checkable.
#[derive(Clone)]
struct Counter {
    next: u32,
    limit: Option<u32>,
}

impl Generator for Counter {
    fn fill(&mut self, buf: &mut [u8], max_units: u64) -> Fill {
        let mut f = Fill::default();
        while f.units < max_units && buf.len() - f.bytes >= 64 && !self.is_finished() {
            for w in 0..16 {
                let v = self.next * 16 + w;
                buf[f.bytes + 4 * w as usize..][..4].copy_from_slice(&v.to_le_bytes());
            }
            self.next += 1;
            f.bytes += 64;
            f.units += 1;
        }
        f
    }
    fn is_finished(&self) -> bool {
        self.limit.is_some_and(|l| self.next >= l)
    }
}

fn drain(ch: &EmulatedChannel<Vec<u8>>, expect_units: u64) -> Vec<u32> {
    let mut words = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while (words.len() as u64) < expect_units * 16 {
        assert!(
            Instant::now() < deadline,
            "channel stalled: {:?}",
            ch.status()
        );
        match ch.pop_superpage() {
            Some(f) => {
                words.extend(
                    f.data()
                        .chunks_exact(4)
                        .map(|b| u32::from_le_bytes(b.try_into().unwrap())),
                );
                let mut sp = f.superpage;
                sp.iter_mut().for_each(|b| *b = 0xEE);
                ch.push_superpage(sp).unwrap();
            }
            None => std::thread::yield_now(),
        }
    }
    words
}

#[test]
fn a_unit_length_is_kept_only_while_every_unit_has_it() {
    let mut f = Fill::default();
    f.append(Fill::default());
    assert_eq!(f, Fill::default());
    f.push_unit(40);
    f.push_unit(40);
    assert_eq!((f.bytes, f.units, f.unit_bytes), (80, 2, 40));
    // A call that wrote nothing changes nothing.
    f.append(Fill::default());
    assert_eq!(f.unit_bytes, 40);
    f.append(Fill {
        bytes: 80,
        units: 2,
        unit_bytes: 40,
    });
    assert_eq!((f.bytes, f.units, f.unit_bytes), (160, 4, 40));
    f.push_unit(44);
    assert_eq!((f.units, f.unit_bytes), (5, 0));
    f.push_unit(40);
    assert_eq!(f.unit_bytes, 0, "once mixed, never reported");
    // A source that reports nothing makes the superpage report nothing.
    let mut g = Fill::default();
    g.push_unit(64);
    g.append(Fill {
        bytes: 64,
        units: 1,
        unit_bytes: 0,
    });
    assert_eq!(g.unit_bytes, 0);
}

#[test]
fn an_emulated_slink_card_reports_its_fragments_length() {
    use crate::generator::{SlinkConfig, SlinkGenerator, WordRange};
    for (data_words, fixed) in [
        (WordRange::fixed(100), true),
        (WordRange::uniform(0, 90), false),
    ] {
        let config = SlinkConfig {
            framing: true,
            data_words,
            ..SlinkConfig::default()
        };
        let ch = EmulatedChannel::start(
            "test-slink-card",
            EmulatedConfig {
                queue_depth: 2,
                ..EmulatedConfig::default()
            },
            SlinkGenerator::new(config),
        )
        .unwrap();
        ch.push_superpage(vec![0; 8192]).unwrap();
        ch.push_superpage(vec![0; 8192]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = 0;
        while seen < 6 {
            assert!(Instant::now() < deadline, "no superpage: {:?}", ch.status());
            let Some(f) = ch.pop_superpage() else {
                std::thread::yield_now();
                continue;
            };
            seen += 1;
            if fixed {
                assert_eq!(f.unit_bytes, 4 * config.fragment_words(100));
            }
            if f.unit_bytes > 0 {
                // Every unit has that length: a begin word at each start, an end word
                // at each end.
                let w: Vec<u32> = f
                    .data()
                    .chunks_exact(4)
                    .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                let n = f.unit_bytes / 4;
                assert_eq!(w.len(), n * f.units as usize);
                for u in w.chunks_exact(n) {
                    assert_eq!(u[0], rodeo_format::fragment::SLINK_BEGIN);
                    assert_eq!(u[n - 1], rodeo_format::fragment::SLINK_END);
                }
            }
            ch.push_superpage(f.superpage).unwrap();
        }
    }
}

#[test]
fn delivers_every_unit_in_order_under_back_pressure() {
    // Two superpages of 1000 bytes (15 units each) for 2000 units: the card must stall and wait.
    let ch = EmulatedChannel::start(
        "test-card",
        EmulatedConfig {
            queue_depth: 2,
            ..EmulatedConfig::default()
        },
        Counter {
            next: 0,
            limit: Some(2000),
        },
    )
    .unwrap();
    ch.push_superpage(vec![0; 1000]).unwrap();
    ch.push_superpage(vec![0; 1000]).unwrap();
    assert!(ch.transfer_queue_available() <= 2);
    // Hold both superpages until the card has filled them and stalled (deterministic back-pressure).
    rodeo_testkit::wait_until(
        "the card to fill both superpages and stall",
        Duration::from_secs(20),
        || ch.status().counters.superpages >= 2 && ch.status().counters.stalls > 0,
    );
    // Both superpages are on the ready queue now: the transfer queue (depth 2) is empty and
    // takes exactly two more.
    assert_eq!(ch.transfer_queue_available(), 2);
    let words = drain(&ch, 2000);
    assert!(
        words.iter().enumerate().all(|(i, &w)| w == i as u32),
        "a unit was lost, duplicated or reordered"
    );
    let st = ch.status();
    assert_eq!(st.counters.units, 2000);
    assert!(
        st.counters.stalls > 0,
        "the card never stalled with only two superpages"
    );
}

#[test]
fn rate_limit_bounds_the_unit_rate() {
    let ch = EmulatedChannel::start(
        "rate-card",
        EmulatedConfig {
            queue_depth: 8,
            max_units_per_s: Some(20_000.0),
            ..EmulatedConfig::default()
        },
        Counter {
            next: 0,
            limit: None,
        },
    )
    .unwrap();
    for _ in 0..8 {
        ch.push_superpage(vec![0; 640]).unwrap();
    }
    let start = Instant::now();
    drain(&ch, 2000);
    // 2000 units at 20 kHz take at least ~0.1 s (minus the 10 ms burst the bucket allows).
    assert!(
        start.elapsed() >= Duration::from_millis(80),
        "rate limit not applied: {:?}",
        start.elapsed()
    );
}

#[test]
fn a_paced_channel_hands_over_a_partly_filled_superpage_at_its_deadline() {
    // 100 units/s into superpages of 1000 units: full only after 10 s. Each superpage
    // must go at most FLUSH_INTERVAL after its first unit, so units arrive as they are
    // written, a few per superpage.
    let ch = EmulatedChannel::start(
        "paced-card",
        EmulatedConfig {
            queue_depth: 4,
            max_units_per_s: Some(100.0),
            ..EmulatedConfig::default()
        },
        Counter {
            next: 0,
            limit: None,
        },
    )
    .unwrap();
    for _ in 0..4 {
        ch.push_superpage(vec![0; 64_000]).unwrap();
    }
    let start = Instant::now();
    let mut units = 0u64;
    let mut superpages = 0u64;
    while units < 20 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{units} units in {superpages} superpages after 5 s: {:?}",
            ch.status()
        );
        match ch.pop_superpage() {
            Some(f) => {
                assert!(f.units <= 3, "{} units waited in one superpage", f.units);
                units += f.units;
                superpages += 1;
                ch.push_superpage(f.superpage).unwrap();
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    assert!(superpages >= 7, "{units} units in {superpages} superpages");
}

#[test]
fn bandwidth_limit_bounds_the_byte_rate() {
    let ch = EmulatedChannel::start(
        "bw-card",
        EmulatedConfig {
            queue_depth: 8,
            max_bytes_per_s: Some(1_280_000.0),
            ..EmulatedConfig::default()
        },
        Counter {
            next: 0,
            limit: None,
        },
    )
    .unwrap();
    for _ in 0..8 {
        ch.push_superpage(vec![0; 640]).unwrap();
    }
    let start = Instant::now();
    // 2000 units of 64 bytes at 1.28 MB/s take at least ~0.1 s.
    let words = drain(&ch, 2000);
    assert!(words.iter().enumerate().all(|(i, &w)| w == i as u32));
    assert!(
        start.elapsed() >= Duration::from_millis(80),
        "bandwidth limit not applied: {:?}",
        start.elapsed()
    );
}

/// Threads of this process named `name`.
fn threads_named(name: &str) -> usize {
    rodeo_testkit::threads_named(name).len()
}

#[test]
fn one_engine_thread_serves_every_channel_of_a_card() {
    let gens: Vec<Counter> = (0..3)
        .map(|_| Counter {
            next: 0,
            limit: Some(500),
        })
        .collect();
    let config = EmulatedConfig {
        queue_depth: 2,
        ..EmulatedConfig::default()
    };
    let mut chans: Vec<EmulatedChannel<Vec<u8>>> =
        EmulatedChannel::start_card("card3", gens.into_iter().map(|g| (config, g)).collect())
            .unwrap();
    assert_eq!(chans[1].card_channels(), 3);
    // The thread names itself when it starts.
    rodeo_testkit::wait_until("the card's thread", Duration::from_secs(20), || {
        threads_named("card3") > 0
    });
    assert_eq!(threads_named("card3"), 1, "one thread for the card");
    for ch in &chans {
        ch.push_superpage(vec![0; 640]).unwrap();
        ch.push_superpage(vec![0; 640]).unwrap();
    }
    // Channel 2 stops early; the others go on to the end.
    chans.pop().unwrap().stop();
    for ch in &chans {
        let words = drain(ch, 500);
        assert!(words.iter().enumerate().all(|(i, &w)| w == i as u32));
    }
    rodeo_testkit::wait_until(
        "every finished channel to go down",
        Duration::from_secs(20),
        || chans.iter().all(|c| !c.status().link_up),
    );
    // The engine published its CPU time when its last channel finished.
    rodeo_testkit::wait_until("the card's CPU time", Duration::from_secs(20), || {
        chans[0].card_cpu_ns() > 0
    });
    assert_eq!(chans[0].card_cpu_ns(), chans[1].card_cpu_ns());
    drop(chans);
    assert_eq!(
        threads_named("card3"),
        0,
        "the engine ends with its channels"
    );
}

/// A lazy channel has no thread: the reader's pops write the units, in order, each
/// superpage once, with the writing CPU counted; it stalls without superpages, goes down
/// after the generator's last unit, and a stop hands over what was written.
#[test]
fn a_lazy_channel_is_filled_by_its_reader() {
    let config = EmulatedConfig {
        queue_depth: 2,
        ..EmulatedConfig::default()
    };
    let counter = Counter {
        next: 0,
        limit: Some(500),
    };
    let ch: EmulatedChannel<Vec<u8>> = EmulatedChannel::start_lazy(config, counter.clone());
    // Nothing to write into: a pop finds nothing and counts a stall.
    assert!(ch.pop_superpage().is_none());
    assert_eq!(ch.status().counters.stalls, 1);
    ch.push_superpage(vec![0; 640]).unwrap();
    ch.push_superpage(vec![0; 640]).unwrap();
    // No thread writes meanwhile.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(ch.status().counters.units, 0);
    let first = ch.pop_superpage().expect("written when popped");
    assert_eq!((first.units, first.sequence), (10, 0));
    assert_eq!(ch.status().counters.superpages, 1, "one superpage per pop");
    ch.push_superpage(first.superpage).unwrap();
    let words = drain(&ch, 490);
    assert!(words.iter().enumerate().all(|(i, &w)| w == 160 + i as u32));
    assert!(!ch.status().link_up, "down after the generator's last unit");
    assert!(ch.card_cpu_ns() > 0, "the writing CPU is counted");
    // The same channel untimed writes the same words and leaves the timing to its reader.
    let untimed: EmulatedChannel<Vec<u8>> = EmulatedChannel::start_lazy_untimed(config, counter);
    untimed.push_superpage(vec![0; 640]).unwrap();
    untimed.push_superpage(vec![0; 640]).unwrap();
    let same = drain(&untimed, 500);
    assert!(same.iter().enumerate().all(|(i, &w)| w == i as u32));
    assert_eq!(
        untimed.card_cpu_ns(),
        0,
        "an untimed channel reads no CPU clock"
    );
    assert!(untimed.reader_write_ns() > 0, "its writing's wall time");
    assert_eq!(ch.reader_write_ns(), 0, "a timed one counts CPU time only");
    // A stop hands over a partly written superpage (a rate-limited channel fills its
    // superpage over several pops) and takes the link down.
    let mut paced: EmulatedChannel<Vec<u8>> = EmulatedChannel::start_lazy(
        EmulatedConfig {
            queue_depth: 2,
            max_units_per_s: Some(1_000.0),
            ..EmulatedConfig::default()
        },
        Counter {
            next: 0,
            limit: None,
        },
    );
    paced.push_superpage(vec![0; 64 * 1024]).unwrap();
    // The bucket gathers tokens for a unit or two (the pace, not a synchronisation).
    std::thread::sleep(Duration::from_millis(3));
    // This pop writes them; the superpage goes at its deadline (FLUSH_INTERVAL) or at the
    // stop, whichever comes first.
    let early = paced.pop_superpage();
    paced.stop();
    assert!(!paced.status().link_up);
    let last = early
        .or_else(|| paced.pop_superpage())
        .expect("the partial superpage");
    assert!(last.units > 0 && last.units < 1024, "{}", last.units);
}

#[test]
fn stop_ends_a_stalled_card() {
    let mut ch: EmulatedChannel<Vec<u8>> = EmulatedChannel::start(
        "stall-card",
        EmulatedConfig::default(),
        Counter {
            next: 0,
            limit: None,
        },
    )
    .unwrap();
    // No superpage: the card stalls at once.
    rodeo_testkit::wait_until("the card to stall", Duration::from_secs(20), || {
        ch.status().counters.stalls > 0
    });
    ch.stop();
    assert!(!ch.status().link_up);
}

/// `end_link` loses nothing the card wrote: a superpage kept back by a full ready queue goes
/// to the reader once it makes room, then the link goes down (`stop` drops that one).
#[test]
fn end_link_hands_over_what_a_full_ready_queue_kept_back() {
    let ch: EmulatedChannel<Vec<u8>> = EmulatedChannel::start(
        "end-card",
        EmulatedConfig {
            queue_depth: 2,
            ..EmulatedConfig::default()
        },
        Counter {
            next: 0,
            limit: None,
        },
    )
    .unwrap();
    // Three superpages of ten units: two fill the ready queue, the third is kept back.
    ch.push_superpage(vec![0; 640]).unwrap();
    ch.push_superpage(vec![0; 640]).unwrap();
    rodeo_testkit::wait_until("two superpages filled", Duration::from_secs(20), || {
        ch.status().ready_queue_len == 2
    });
    ch.push_superpage(vec![0; 640]).unwrap();
    rodeo_testkit::wait_until("the third kept back", Duration::from_secs(20), || {
        ch.status().counters.units == 30 && ch.status().counters.stalls > 0
    });
    ch.end_link();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut words = Vec::new();
    loop {
        let st = ch.status();
        if !st.link_up && st.ready_queue_len == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the link never ended: {st:?}");
        match ch.pop_superpage() {
            Some(f) => words.extend(
                f.data()
                    .chunks_exact(4)
                    .map(|b| u32::from_le_bytes(b.try_into().unwrap())),
            ),
            None => std::thread::yield_now(),
        }
    }
    assert_eq!(
        words.len(),
        30 * 16,
        "every unit written reaches the reader"
    );
    assert!(words.iter().enumerate().all(|(i, &w)| w == i as u32));
    assert_eq!(
        ch.status().counters.units,
        30,
        "nothing written after the end"
    );
}
