//! The sync subsystem's own settings: the barrier algorithm (`FH_BARRIER`) and the
//! broadcast tree's postal-model latency (`FH_BCAST_LAMBDA`).
//!
//! Guarantees: each variable has one parser, here; both are job-wide (every rank
//! must run the same algorithm), which `fh_init` checks through the composed table
//! (`api::settings`).

use crate::bail;
use crate::runtime::config::{Group, Scope, Setting};

/// `FH_BARRIER`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    /// Shared memory inside a node, dissemination across nodes (`node`).
    Node,
    Dissemination,
    Tree,
    /// The transport's own barrier: a nonblocking max-reduction
    /// (`Conduit::reduce3_start`; `MPI_Iallreduce` on the MPI conduit). Named "mpi"
    /// in `FH_BARRIER`.
    Transport,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Node => "node",
            Algo::Dissemination => "dissemination",
            Algo::Tree => "tree",
            Algo::Transport => "mpi",
        }
    }
}

/// The sync subsystem's settings as resolved on this rank.
#[derive(Clone, Debug)]
pub struct SyncSettings {
    /// Barrier algorithm (`FH_BARRIER`).
    pub barrier: Algo,
    /// Postal-model latency λ for the broadcast tree (`FH_BCAST_LAMBDA`; None:
    /// measured at the first broadcast).
    pub bcast_lambda: Option<u32>,
}

impl Group for SyncSettings {
    const ROWS: &'static [Setting<SyncSettings>] = ROWS;

    fn blank() -> SyncSettings {
        SyncSettings {
            barrier: Algo::Node,
            bcast_lambda: None,
        }
    }
}

static ROWS: &[Setting<SyncSettings>] = &[
    Setting::<SyncSettings> {
        name: "FH_BARRIER",
        scope: Scope::Job,
        default: "node",
        help: "barrier algorithm: node (shared-memory counter and release inside a node, dissemination across nodes), dissemination (pairwise exchange, any N), tree (gather-and-broadcast, fan-in 4) or mpi (MPI_Iallreduce)",
        set: |c, v| {
            c.barrier = match v.trim().to_ascii_lowercase().as_str() {
                "node" => Algo::Node,
                "dissemination" | "pairwise" => Algo::Dissemination,
                "tree" => Algo::Tree,
                "mpi" => Algo::Transport,
                other => bail!(
                    InvalidArg,
                    "FH_BARRIER={}: expected node, dissemination, tree or mpi",
                    other
                ),
            };
            Ok(())
        },
        show: |c| c.barrier.name().into(),
    },
    Setting::<SyncSettings> {
        name: "FH_BCAST_LAMBDA",
        scope: Scope::Job,
        default: "auto",
        help: "postal-model latency (in send overheads, 1..64) the broadcast tree is built for; auto: measured at the first broadcast; 1 gives the binomial tree",
        set: |c, v| {
            c.bcast_lambda = match v.trim() {
                "auto" => None,
                x => match x.parse::<u32>() {
                    Ok(l) if (1..=64).contains(&l) => Some(l),
                    _ => bail!(InvalidArg, "FH_BCAST_LAMBDA={}: expected auto or 1..64", x),
                },
            };
            Ok(())
        },
        show: |c| c.bcast_lambda.map_or("auto".into(), |l| l.to_string()),
    },
];
