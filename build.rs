//! Build script: give the shared library a soname carrying the major version.
//! (Which MPI we link is decided by the `mpi` crate's build; the library reads the
//! MPI family from the compiled-in ABI, see `conduit::mpi::boot::BUILT_FOR`.)

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("set by cargo");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,-soname,libfirehose.so.{}",
        major
    );
}
