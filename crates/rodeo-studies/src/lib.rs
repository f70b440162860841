//! rodeo's benches and studies: the papers' measurement methods as library calls.
//!
//! **Role in the flow.** Nothing here is on the data path. This crate sits above the readout
//! crates (cards, SW ROD, ROS, ROSTester) and drives them the way the papers measured them: a
//! readout node under the ROSTester's request mix (`bench ros`, `study ros`, `study slice`),
//! the plain ZeroMQ baseline (`study sfi`), the memory pool (`bench pool`), the emulated DMA
//! channels (`bench dma`) and the SW ROD fragment builder (`bench swrod`).
//!
//! **Owns.** Every measurement's options ([`bench::pool::Args`], ...; clap `Args` structs, so the
//! command line spells them and a library caller builds them with [`defaults`]), its result as a
//! [`report::Report`] (one JSON object with a `rows` array), and the study outputs (CSV,
//! `summary.json`, PNG plots). The `rodeo bench`/`rodeo study` commands only parse arguments and
//! print what these functions return.
//!
//! **Must not depend on** the dataflow, control or binary crates: a study of the readout is
//! runnable without a partition. Nothing here runs in the background after a call returns: every
//! node and thread a measurement starts is stopped and joined before it returns.

pub mod bench;
pub mod plain;
pub mod report;
pub mod study;

/// The default value of an options struct: what the command line gives when no option is set.
///
/// ```
/// let mix: rodeo_rostester::drive::MixArgs = rodeo_studies::defaults();
/// assert_eq!(mix.clear_group, 100);
/// ```
pub fn defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    defaults_with(&[])
}

/// An options struct from the given command-line words (the required positional arguments, for
/// example a study's name), every other option at its default.
///
/// Panics when the words do not parse: they are the caller's constants, not outside input.
pub fn defaults_with<T: clap::Args + clap::FromArgMatches>(words: &[&str]) -> T {
    let cmd = T::augment_args(clap::Command::new("defaults").no_binary_name(true));
    let matches = match cmd.try_get_matches_from(words) {
        Ok(m) => m,
        Err(e) => panic!("options {words:?} do not parse: {e}"),
    };
    match T::from_arg_matches(&matches) {
        Ok(t) => t,
        Err(e) => panic!("options {words:?} do not match their own definition: {e}"),
    }
}
