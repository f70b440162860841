//! Checksum throughput on 1 MiB: fast paths and scalar baselines.

// criterion_group! defines an undocumented `pub fn`.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rodeo_format::checksum::{
    adler32, adler32_scalar, crc16, crc16_scalar, crc16_words, crc16_words_scalar, words_as_bytes,
    ADLER32_INIT, CRC16_INIT,
};

fn input() -> Vec<u32> {
    let mut x = 0x9E37_79B9u32;
    (0..(1 << 18))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        })
        .collect()
}

fn checksums(c: &mut Criterion) {
    let words = input();
    let bytes = words_as_bytes(&words);
    let mut g = c.benchmark_group("checksum_1MiB");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("adler32", |b| {
        b.iter(|| adler32(ADLER32_INIT, black_box(bytes)))
    });
    g.bench_function("adler32_scalar", |b| {
        b.iter(|| adler32_scalar(ADLER32_INIT, black_box(bytes)))
    });
    g.bench_function("crc16", |b| b.iter(|| crc16(CRC16_INIT, black_box(bytes))));
    g.bench_function("crc16_words", |b| {
        b.iter(|| crc16_words(CRC16_INIT, black_box(&words)))
    });
    g.bench_function("crc16_scalar", |b| {
        b.iter(|| crc16_scalar(CRC16_INIT, black_box(bytes)))
    });
    g.bench_function("crc16_words_scalar", |b| {
        b.iter(|| crc16_words_scalar(CRC16_INIT, black_box(&words)))
    });
    g.finish();
}

criterion_group!(benches, checksums);
criterion_main!(benches);
