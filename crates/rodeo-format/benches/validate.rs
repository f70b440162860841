//! Validation throughput: parse a 1 MiB full event of 100 ROBs and iterate the ROB headers; and,
//! for comparison, the same plus verifying every ROB checksum.

// criterion_group! defines an undocumented `pub fn`.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rodeo_format::checksum::ChecksumType;
use rodeo_format::fragment::{
    EventBuilder, FullEvent, RobBuilder, RobPayload, RodBuilder, SourceId, SubDetector,
};

const ROBS: usize = 100;

fn event() -> Vec<u32> {
    let data: Vec<u32> = (0..(1u32 << 18) / ROBS as u32 - 40).collect();
    let mut robs = Vec::new();
    for i in 0..ROBS {
        let pieces: [&[u32]; 1] = [&data];
        let mut rob = Vec::new();
        RobBuilder {
            source_id: SourceId::new(SubDetector::TILE_LASER, i as u16),
            status: &[0],
            checksum: ChecksumType::Adler32,
            payload: RobPayload::Rod(RodBuilder {
                source_id: SourceId::new(SubDetector::TILE_LASER, i as u16),
                status: &[0],
                data: &pieces,
                ..RodBuilder::default()
            }),
        }
        .write_vec(&mut rob)
        .expect("ROB fits");
        robs.push(rob);
    }
    let pieces: Vec<&[u32]> = robs.iter().map(Vec::as_slice).collect();
    let mut out = Vec::new();
    EventBuilder {
        source_id: SourceId::new(SubDetector::TDAQ_EVENT_FILTER, 0),
        checksum: ChecksumType::Adler32,
        robs: &pieces,
        ..EventBuilder::default()
    }
    .write_vec(&mut out)
    .expect("event fits");
    out
}

fn validate(c: &mut Criterion) {
    let words = event();
    let mut g = c.benchmark_group("validate_1MiB_100_robs");
    g.throughput(Throughput::Bytes(std::mem::size_of_val(&words[..]) as u64));
    g.bench_function("headers", |b| {
        b.iter(|| {
            let e = FullEvent::parse(black_box(&words)).expect("valid");
            e.validate_robs().expect("valid")
        })
    });
    g.bench_function("headers_and_rob_checksums", |b| {
        b.iter(|| {
            let e = FullEvent::parse(black_box(&words)).expect("valid");
            for rob in e.robs() {
                rob.expect("valid").verify_checksum().expect("valid");
            }
        })
    });
    g.finish();
}

criterion_group!(benches, validate);
criterion_main!(benches);
