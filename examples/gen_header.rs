//! Writes include/firehose.h from the Rust sources (cbindgen). `make header` runs it;
//! `make check-header` runs it into a temporary file and diffs.
use std::path::PathBuf;

fn main() {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "include/firehose.h".into());
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut cfg =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    cfg.after_includes = Some(format!(
        "\n#define FH_VERSION_MAJOR {}\n#define FH_VERSION_MINOR {}\n#define FH_VERSION_PATCH {}\n#define FH_VERSION_STRING \"{}\"\n",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_PATCH"),
        env!("CARGO_PKG_VERSION"),
    ));
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(cfg)
        .generate()
        .expect("cbindgen failed")
        .write_to_file(out);
}
