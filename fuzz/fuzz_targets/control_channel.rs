//! Fuzz target: the control channel's frame decoder (controller <-> `rodeo app`) on arbitrary
//! bytes, in both directions. Errors are typed; nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rodeo_control::channel::{decode, ToApp, ToController};

fuzz_target!(|data: &[u8]| {
    let _ = decode::<ToApp>(data);
    let _ = decode::<ToController>(data);
});
