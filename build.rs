//! Build script: record which MPI we link (for the run-time mismatch check and
//! firehose.pc) and give the shared library a versioned soname.

fn main() {
    println!("cargo:rerun-if-env-changed=MPICC");
    println!("cargo:rerun-if-env-changed=MPI_PKG_CONFIG");
    println!("cargo:rerun-if-changed=build.rs");
    let (vendor, libs) = match build_probe_mpi::probe() {
        Ok(lib) => {
            let names = lib.libs.join(" ");
            let paths: Vec<String> = lib
                .lib_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            let all = format!(
                "{} {} {}",
                names,
                paths.join(" "),
                lib.mpicc.clone().unwrap_or_default()
            );
            let vendor = if all.contains("mpich") {
                "mpich"
            } else if all.contains("openmpi") || lib.libs.iter().any(|l| l == "mpi") {
                "openmpi"
            } else {
                "unknown"
            };
            let mut line: Vec<String> = paths.iter().map(|p| format!("-L{}", p)).collect();
            line.extend(lib.libs.iter().map(|l| format!("-l{}", l)));
            (vendor, line.join(" "))
        }
        Err(_) => ("unknown", String::new()),
    };
    println!("cargo:rustc-env=FH_MPI_VENDOR={}", vendor);
    println!("cargo:rustc-env=FH_MPI_LIBS={}", libs);
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,-soname,libfirehose.so.{}",
        major
    );
}
