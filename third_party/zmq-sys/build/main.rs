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
    zeromq_src::Build::new()
        .with_libsodium(Some(zeromq_src::LibLocation::new(lib, include)))
        .build();
}

fn main() {
    configure()
}
