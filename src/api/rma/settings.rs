//! The RMA subsystem's own settings: which algorithm moves a non-contiguous
//! transfer (`FH_VIS_ALGORITHM`) and the automatic choice's threshold
//! (`FH_VIS_PACK_MAX`: below it pack, above it datatype where it applies).
//!
//! Guarantees: each variable has one parser, here. Both are per rank: the target
//! serves every algorithm whatever its own choice (the pack algorithm's handlers are
//! always registered).

use crate::bail;
use crate::runtime::config::{Group, Scope, Setting};

/// `FH_VIS_ALGORITHM`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VisAlgo {
    /// Chosen per call from the shape and the target (see `vis::choose`).
    Auto,
    /// One transfer per contiguous segment (vectored kernel copy to node peers).
    Direct,
    /// Segments packed into active-message mediums, unpacked by the target.
    Pack,
    /// One MPI put/get with derived datatypes, where the target section lies in
    /// the heap or one registered region on the MPI path (else direct).
    Datatype,
}

impl VisAlgo {
    pub fn name(self) -> &'static str {
        match self {
            VisAlgo::Auto => "auto",
            VisAlgo::Direct => "direct",
            VisAlgo::Pack => "pack",
            VisAlgo::Datatype => "datatype",
        }
    }
}

/// The RMA subsystem's settings as resolved on this rank.
#[derive(Clone, Debug)]
pub struct RmaSettings {
    /// `FH_VIS_ALGORITHM`.
    pub vis_algo: VisAlgo,
    /// `FH_VIS_PACK_MAX`: under `auto`, a transfer to a peer outside the node
    /// mapping and the kernel copy is packed when its segments average at most this
    /// many bytes, and moved with MPI datatypes above it where that applies.
    pub vis_pack_max: usize,
}

impl Group for RmaSettings {
    const ROWS: &'static [Setting<RmaSettings>] = ROWS;

    fn blank() -> RmaSettings {
        RmaSettings {
            vis_algo: VisAlgo::Auto,
            vis_pack_max: 0,
        }
    }
}

static ROWS: &[Setting<RmaSettings>] = &[
    Setting::<RmaSettings> {
        name: "FH_VIS_ALGORITHM",
        scope: Scope::Rank,
        default: "auto",
        help: "non-contiguous put/get algorithm: auto (chosen per call), direct (one transfer per contiguous run; one vectored kernel copy to node peers), pack (runs packed into active messages, unpacked by the target) or datatype (one MPI put/get with derived datatypes where the target section lies in the heap or one registered region, else direct)",
        set: |c, v| {
            c.vis_algo = match v.trim().to_ascii_lowercase().as_str() {
                "auto" => VisAlgo::Auto,
                "direct" => VisAlgo::Direct,
                "pack" => VisAlgo::Pack,
                "datatype" => VisAlgo::Datatype,
                other => bail!(
                    InvalidArg,
                    "FH_VIS_ALGORITHM={}: expected auto, direct, pack or datatype",
                    other
                ),
            };
            Ok(())
        },
        show: |c| c.vis_algo.name().into(),
    },
    Setting::<RmaSettings> {
        name: "FH_VIS_PACK_MAX",
        scope: Scope::Rank,
        default: "1K",
        help: "with FH_VIS_ALGORITHM=auto, a non-contiguous transfer to a peer outside the node (no node mapping, no kernel copy) whose contiguous runs average at most this many bytes is packed; above it, one MPI datatype put/get where the target section is in the heap or one registered region (0: never pack); docs/PERFORMANCE.md has the measurement behind the default",
        set: |c, v| {
            let n = crate::runtime::config::parse_size(v)?;
            if n > 1 << 30 {
                bail!(InvalidArg, "FH_VIS_PACK_MAX={}: expected a size up to 1G", v);
            }
            c.vis_pack_max = n;
            Ok(())
        },
        show: |c| c.vis_pack_max.to_string(),
    },
];
