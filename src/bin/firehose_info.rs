//! `firehose_info`: what a site needs to know before running firehose, without
//! `mpirun` (in the manner of `ucx_info`, `fi_info`, `ompi_info`).
//!
//! Prints the library's version and ABI, the MPI it was built against and the one
//! found at run time, the conduits compiled in, whether the kernel's single copy is
//! permitted here, `/dev/shm` room, `RLIMIT_MEMLOCK`, Open MPI's dynamic-window
//! attach limit, and every setting with its default, current value and source.
//! `-c` prints only the settings, as `NAME=value` lines a shell can source;
//! `--settings-tsv` prints the settings table for the man page.
//!
//! Guarantees: it never calls `MPI_Init` (only `MPI_Get_library_version` and the
//! MPI tool interface, both allowed before it); a bad `FH_*` value is reported
//! exactly as `fh_init` reports it; exit status 0 when usable, 1 when the
//! environment is unusable (a bad value, or an MPI other than the one the library
//! was built against), 2 on a usage error.

use firehose::api::settings::Settings;
use firehose::conduit::mpi::boot;
use firehose::runtime::config::Scope;
use firehose::runtime::os;
use std::process::ExitCode;

const USAGE: &str = "usage: firehose_info [-c | --settings-tsv | -h | -V]
  (no option)     library, MPI, node facts and every setting (default, value, source)
  -c              only the settings, as NAME=value lines a shell can source
  --settings-tsv  the settings table: NAME, DEFAULT, SCOPE, HELP (tab-separated)
  -h, --help      this text
  -V, --version   the library version";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] => report(),
        ["-c"] => settings_only(),
        ["--settings-tsv"] => {
            settings_tsv();
            ExitCode::SUCCESS
        }
        ["-h"] | ["--help"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        ["-V"] | ["--version"] => {
            println!("firehose {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("firehose_info: unknown arguments {args:?}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// The settings from the environment, or the message `fh_init` would give.
fn settings() -> Result<Settings, String> {
    Settings::from_env(&[]).map_err(|e| e.to_string())
}

/// The whole report. Unusable: a bad setting, or the wrong MPI at run time.
fn report() -> ExitCode {
    let mut usable = true;
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    println!(
        "firehose {} (ABI {major}: libfirehose.so.{major})",
        env!("CARGO_PKG_VERSION")
    );
    println!("  conduits compiled in:   mpi (the default), sim (in one process, for tests)");
    println!("  MPI built against:      {}", boot::BUILT_FOR);
    let runtime = boot::library_version();
    let first = runtime
        .lines()
        .next()
        .unwrap_or("(MPI_Get_library_version failed)");
    println!("  MPI found at run time:  {first}");
    if let Err(e) = boot::check_library() {
        println!("  UNUSABLE: {}", e.msg);
        usable = false;
    }
    println!("  kernel single copy:     {}", single_copy());
    println!("  /dev/shm:               {}", dev_shm());
    println!("  RLIMIT_MEMLOCK:         {}", memlock());
    println!("  dynamic-window attach:  {}", attach_limit());
    match settings() {
        Ok(s) => {
            println!("settings (name = value [default; source; scope]  what it does):");
            for r in s.rows() {
                println!(
                    "  {:<27} = {:<12} [default {}; {}; {}]  {}",
                    r.name,
                    r.value,
                    r.default,
                    r.source.label(),
                    r.scope.label(),
                    r.help
                );
            }
            for (var, near) in Settings::unknown_env(std::env::vars().map(|(k, _)| k)) {
                let hint = near
                    .map(|n| format!(" (did you mean {n}?)"))
                    .unwrap_or_default();
                println!("  note: {var} is not a firehose setting{hint}");
            }
        }
        Err(msg) => {
            println!("settings: UNUSABLE: {msg}");
            usable = false;
        }
    }
    if usable {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `-c`: `NAME='value'` lines (the current values; a shell can source them).
fn settings_only() -> ExitCode {
    match settings() {
        Ok(s) => {
            for r in s.rows() {
                println!("{}='{}'", r.name, r.value.replace('\'', "'\\''"));
            }
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("firehose_info: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// `--settings-tsv`: the defaults' table (the environment is not read).
fn settings_tsv() {
    for r in Settings::defaults().rows() {
        let scope = match r.scope {
            Scope::Job => "job",
            Scope::Rank => "rank",
        };
        println!("{}\t{}\t{}\t{}", r.name, r.default, scope, r.help);
    }
}

/// Is the kernel's single copy (`process_vm_readv`) permitted between processes
/// of this user? Tried for real: a child reads a word of this process, after this
/// process allowed it as the library does (`PR_SET_PTRACER_ANY`).
fn single_copy() -> String {
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|s| format!("Yama ptrace_scope {}", s.trim()))
        .unwrap_or_else(|_| "no Yama".into());
    static WORD: u64 = 0x6669_7265_686f_7365;
    os::allow_single_copy_peers();
    let parent = std::process::id() as i32;
    // SAFETY: this program is single-threaded here (no MPI call was made yet); the
    // child only reads through the kernel and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut got: u64 = 0;
        let addr = &WORD as *const u64 as usize;
        let r = os::vm_copy(
            parent,
            os::VmDir::Read,
            addr,
            &mut got as *mut u64 as usize,
            8,
        );
        let code = match r {
            Ok(()) if got == WORD => 0,
            Err(os::VmError::Denied) => 3,
            _ => 4,
        };
        // SAFETY: leaving the forked child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    if pid < 0 {
        return format!("unknown (fork failed; {yama})");
    }
    let mut status = 0;
    // SAFETY: waiting for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    match code {
        0 => {
            format!("permitted ({yama}): node peers' memory is reached without their CPU (FH_CMA)")
        }
        3 => format!(
            "NOT permitted ({yama}, or no CAP_SYS_PTRACE in a container): node peers' memory \
             outside the heap goes through firehose moves"
        ),
        c => format!("unknown (probe ended with {c}; {yama})"),
    }
}

fn dev_shm() -> String {
    match os::tmpfs_available("/dev/shm") {
        Some(n) => format!(
            "{} free (each rank maps its library heap there for node peers: FH_HEAP_SIZE)",
            size(n)
        ),
        None => "not available: node peers use MPI for heap accesses (FH_SHM=0 behaviour)".into(),
    }
}

fn memlock() -> String {
    match os::memlock_limit() {
        None => "unlimited".into(),
        Some(n) => format!(
            "{} (pinned memory beyond it is registered without mlock; FH_FIREHOSE_M is derived from it)",
            size(n)
        ),
    }
}

fn attach_limit() -> String {
    if boot::BUILT_FOR != "openmpi" {
        return "no limit (MPICH family)".into();
    }
    match boot::ompi_max_attach() {
        Some(n) => format!("{n} attachments per dynamic window (Open MPI osc_rdma_max_attach)"),
        None => "could not be read (MPI_T)".into(),
    }
}

fn size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (n as f64, 0);
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {} ({n} bytes)", UNITS[u])
}
