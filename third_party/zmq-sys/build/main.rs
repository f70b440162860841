pub fn configure() {
    println!("cargo:rerun-if-changed=build/main.rs");
    println!("cargo:rerun-if-env-changed=PROFILE");
    println!("cargo:rerun-if-env-changed=DEP_SODIUM_INCLUDE");
    println!("cargo:rerun-if-env-changed=DEP_SODIUM_LIB");

    // Note that by default `libzmq` builds without `libsodium` by instead
    // relying on `tweetnacl`. However since this `tweetnacl` [has never been
    // audited nor is ready for production](https://github.com/zeromq/libzmq/issues/3006),
    // we link against `libsodium` to enable `ZMQ_CURVE`.
    //
    // rodeo's change (the only one in this crate): the published 0.12.0 passes `None` here,
    // which builds libzmq without CURVE. The libsodium built by the `libsodium-sys-stable`
    // dependency is handed over instead; that crate publishes where it put the headers and
    // the static library as `links = "sodium"` metadata.
    let include = std::env::var_os("DEP_SODIUM_INCLUDE").expect(
        "zmq-sys (rodeo's patched copy): DEP_SODIUM_INCLUDE is not set; libsodium-sys-stable \
         did not build libsodium from source (unset SODIUM_LIB_DIR and SODIUM_USE_PKG_CONFIG)",
    );
    let lib = std::env::var_os("DEP_SODIUM_LIB").expect(
        "zmq-sys (rodeo's patched copy): DEP_SODIUM_LIB is not set; libsodium-sys-stable \
         did not build libsodium from source (unset SODIUM_LIB_DIR and SODIUM_USE_PKG_CONFIG)",
    );
    // zeromq-src prints this search path with `{:?}` (quoted); give it unquoted too.
    println!("cargo:rustc-link-search=native={}", std::path::Path::new(&lib).display());
    linux_platform_defines();
    zeromq_src::Build::new()
        .with_libsodium(Some(zeromq_src::LibLocation::new(lib, include)))
        .build();
}

/// rodeo's second change: zeromq-src compiles libzmq without running its CMake platform checks,
/// so on Linux it leaves out `ZMQ_HAVE_EVENTFD`: every mailbox signaler (one per socket and per
/// I/O thread, rung whenever a pipe wakes its reader) is then a Unix socket pair, each signal a
/// `send` and a `recv` through the kernel's socket buffers. With it, a signaler is one eventfd
/// (an 8-byte `write` and `read`), as libzmq's own CMake build makes it on Linux; with the
/// `CLOEXEC` variants eventfds and sockets are close-on-exec from their creation (without them
/// libzmq sets it with a second call, `fcntl`, after). zeromq-src's `cc` build reads
/// `CXXFLAGS` from this process's environment, so the defines go there.
fn linux_platform_defines() {
    println!("cargo:rerun-if-env-changed=CXXFLAGS");
    let target = std::env::var("TARGET").unwrap_or_default();
    if !target.contains("linux") || target.contains("android") {
        return;
    }
    let defines = "-DZMQ_HAVE_EVENTFD=1 -DZMQ_HAVE_EVENTFD_CLOEXEC=1 -DZMQ_HAVE_SOCK_CLOEXEC=1";
    let flags = match std::env::var("CXXFLAGS") {
        Ok(old) if !old.trim().is_empty() => format!("{} {}", old, defines),
        _ => defines.to_string(),
    };
    // A build script is one thread: nothing else reads the environment while it changes.
    std::env::set_var("CXXFLAGS", flags);
}

fn main() {
    configure()
}
