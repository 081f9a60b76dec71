//! The move protocol's messages (seed 000 §3.2, "Firehose move"): a *move request*
//! gives back some of the sender's firehoses on the target and asks for new ones on
//! pieces of the target's memory, and may carry a small put or get along (so a miss
//! costs one round trip); the *answer* lists what the sender now holds.
//!
//! Both travel as an AM frame: a few fixed argument words and a payload of u64 words
//! (little-endian), then the bytes of a carried put or get.
//!
//! Guarantees: `decode` accepts exactly what `encode` produces and refuses every
//! inconsistent frame (counts that do not match the payload, overflowing sizes) with
//! `None`, never panicking; tested below against arbitrary input.

/// What a move carries besides its pins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carried {
    None,
    /// A put of `len` bytes to `addr` (the bytes follow the pieces).
    Put {
        addr: usize,
        len: usize,
    },
    /// A get of `len` bytes from `addr` (the answer brings them).
    Get {
        addr: usize,
        len: usize,
    },
}

const CARRY_NONE: u64 = 0;
const CARRY_PUT: u64 = 1;
const CARRY_GET: u64 = 2;
/// Request flag: the pins are for a put or an atomic (writable memory needed).
const WRITE: u64 = 1;

/// Argument words of a request and of an answer.
pub(crate) const REQUEST_ARGS: usize = 7;
pub(crate) const ANSWER_ARGS: usize = 5;

/// A move request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveRequest<'a> {
    /// Names the move (the answer repeats it).
    pub id: u64,
    /// Starts of the units whose firehoses the sender gives back.
    pub releases: Vec<usize>,
    /// Pieces `[a, b)` of the target's memory, each within one granule.
    pub pins: Vec<(usize, usize)>,
    pub carried: Carried,
    /// Puts and atomics need writable memory; gets only readable.
    pub write: bool,
    /// The bytes of a carried put (empty otherwise).
    pub put_data: &'a [u8],
}

impl MoveRequest<'_> {
    /// Argument words and payload.
    pub fn encode(&self) -> ([u64; REQUEST_ARGS], Vec<u8>) {
        let mut p = Vec::with_capacity(
            8 * self.releases.len() + 16 * self.pins.len() + self.put_data.len(),
        );
        for &r in &self.releases {
            p.extend_from_slice(&(r as u64).to_le_bytes());
        }
        for &(a, b) in &self.pins {
            p.extend_from_slice(&(a as u64).to_le_bytes());
            p.extend_from_slice(&(b as u64).to_le_bytes());
        }
        let (kind, addr, len) = match self.carried {
            Carried::None => (CARRY_NONE, 0, 0),
            Carried::Put { addr, len } => {
                debug_assert_eq!(len, self.put_data.len());
                p.extend_from_slice(self.put_data);
                (CARRY_PUT, addr, len)
            }
            Carried::Get { addr, len } => (CARRY_GET, addr, len),
        };
        let args = [
            self.id,
            self.releases.len() as u64,
            self.pins.len() as u64,
            addr as u64,
            len as u64,
            kind,
            if self.write { WRITE } else { 0 },
        ];
        (args, p)
    }
}

impl<'a> MoveRequest<'a> {
    /// The request in `args` and `body`; `None` if they do not make one.
    pub fn decode(args: &[u64], body: &'a [u8]) -> Option<MoveRequest<'a>> {
        let [id, nrel, npins, addr, len, kind, flags] =
            *<&[u64; REQUEST_ARGS]>::try_from(args).ok()?;
        let (nrel, npins, len) = (
            usize::try_from(nrel).ok()?,
            usize::try_from(npins).ok()?,
            usize::try_from(len).ok()?,
        );
        let put_len = if kind == CARRY_PUT { len } else { 0 };
        let words = nrel.checked_add(npins.checked_mul(2)?)?;
        if words.checked_mul(8)?.checked_add(put_len)? != body.len() {
            return None;
        }
        let w = read_u64s(&body[..words * 8]);
        let carried = match kind {
            CARRY_NONE => Carried::None,
            CARRY_PUT => Carried::Put {
                addr: addr as usize,
                len,
            },
            CARRY_GET => Carried::Get {
                addr: addr as usize,
                len,
            },
            _ => return None,
        };
        Some(MoveRequest {
            id,
            releases: w[..nrel].iter().map(|&x| x as usize).collect(),
            pins: w[nrel..]
                .chunks_exact(2)
                .map(|p| (p[0] as usize, p[1] as usize))
                .collect(),
            carried,
            write: flags & WRITE != 0,
            put_data: &body[words * 8..],
        })
    }
}

/// What an answer grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granted {
    /// A firehose on the unit `[start, end)`.
    Unit,
    /// The same, on memory that was read-only when pinned: gets only.
    UnitReadOnly,
    /// The range is a region the target registered: prepinned, no firehose.
    Region,
}

impl Granted {
    fn code(self) -> u64 {
        match self {
            Granted::Unit => 0,
            Granted::Region => 1,
            Granted::UnitReadOnly => 2,
        }
    }
    fn of(code: u64) -> Option<Granted> {
        Some(match code {
            0 => Granted::Unit,
            1 => Granted::Region,
            2 => Granted::UnitReadOnly,
            _ => return None,
        })
    }
}

/// A move's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveAnswer<'a> {
    pub id: u64,
    /// `FH_OK` or the status of the refusal.
    pub status: i32,
    /// With `FH_ERR_ACCESS`: why the memory was refused (`state::WHY`).
    pub why: u8,
    pub granted: Vec<(Granted, usize, usize)>,
    /// A carried put was written, or a carried get's bytes are in `get_data`.
    pub carried_done: bool,
    /// The target's invalidation epoch when it made this answer (`Invalidations`).
    pub epoch: u64,
    pub get_data: &'a [u8],
}

impl MoveAnswer<'_> {
    pub fn encode(&self) -> ([u64; ANSWER_ARGS], Vec<u8>) {
        let mut p = Vec::with_capacity(24 * self.granted.len() + self.get_data.len());
        for &(g, s, e) in &self.granted {
            for x in [g.code(), s as u64, e as u64] {
                p.extend_from_slice(&x.to_le_bytes());
            }
        }
        p.extend_from_slice(self.get_data);
        let args = [
            self.id,
            (self.status as i64 as u64 & 0xffff_ffff) | (self.why as u64) << 32,
            self.granted.len() as u64,
            self.carried_done as u64,
            self.epoch,
        ];
        (args, p)
    }
}

impl<'a> MoveAnswer<'a> {
    pub fn decode(args: &[u64], payload: &'a [u8]) -> Option<MoveAnswer<'a>> {
        let [id, st, n, done, epoch] = *<&[u64; ANSWER_ARGS]>::try_from(args).ok()?;
        let n = usize::try_from(n).ok()?;
        let bytes = n.checked_mul(24)?;
        if bytes > payload.len() {
            return None;
        }
        let w = read_u64s(&payload[..bytes]);
        let granted = w
            .chunks_exact(3)
            .map(|t| Some((Granted::of(t[0])?, t[1] as usize, t[2] as usize)))
            .collect::<Option<Vec<_>>>()?;
        Some(MoveAnswer {
            id,
            status: st as i64 as i32,
            why: (st >> 32) as u8,
            granted,
            carried_done: done != 0,
            epoch,
            get_data: &payload[bytes..],
        })
    }

    /// The id of what looks like an answer (to release a waiter even when the rest
    /// does not decode).
    pub fn id_of(args: &[u64]) -> Option<u64> {
        args.first().copied()
    }
}

/// The little-endian u64 words of `b` (a multiple of 8 bytes).
fn read_u64s(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_and_answers_round_trip() {
        let data = [5u8; 24];
        let r = MoveRequest {
            id: 9,
            releases: vec![0x1000, 0x3000],
            pins: vec![(0x8000, 0x8400)],
            carried: Carried::Put {
                addr: 0x8010,
                len: 24,
            },
            write: true,
            put_data: &data,
        };
        let (a, p) = r.encode();
        assert_eq!(MoveRequest::decode(&a, &p), Some(r));
        let g = [1u8, 2, 3];
        let ans = MoveAnswer {
            id: 9,
            status: -6,
            why: 4,
            granted: vec![
                (Granted::UnitReadOnly, 0x8000, 0x9000),
                (Granted::Region, 1, 2),
            ],
            carried_done: true,
            epoch: 77,
            get_data: &g,
        };
        let (a, p) = ans.encode();
        assert_eq!(MoveAnswer::decode(&a, &p), Some(ans));
    }

    #[test]
    fn inconsistent_frames_are_refused() {
        let (mut a, p) = MoveRequest {
            id: 1,
            releases: vec![1],
            pins: vec![],
            carried: Carried::None,
            write: false,
            put_data: &[],
        }
        .encode();
        assert!(MoveRequest::decode(&a[..6], &p).is_none(), "too few words");
        a[1] = 2;
        assert!(
            MoveRequest::decode(&a, &p).is_none(),
            "count beyond the payload"
        );
        a[1] = u64::MAX;
        assert!(MoveRequest::decode(&a, &p).is_none(), "overflowing count");
        a[1] = 1;
        a[5] = 9;
        assert!(MoveRequest::decode(&a, &p).is_none(), "unknown carry");
        assert!(MoveAnswer::decode(&[1, 0, 1, 0, 0], &[0u8; 23]).is_none());
        assert!(
            MoveAnswer::decode(&[1, 0, 1, 0, 0], &[9u8; 24]).is_none(),
            "unknown grant"
        );
    }

    proptest! {
        /// Arbitrary words and bytes never panic the decoders, and what decodes
        /// survives an encode and decode unchanged.
        #[test]
        fn decoders_never_panic(args in proptest::collection::vec(any::<u64>(), 0..9),
                                body in proptest::collection::vec(any::<u8>(), 0..96)) {
            if let Some(r) = MoveRequest::decode(&args, &body) {
                let (a, p) = r.encode();
                prop_assert_eq!(MoveRequest::decode(&a, &p), Some(r));
            }
            if let Some(ans) = MoveAnswer::decode(&args, &body) {
                let (a, p) = ans.encode();
                prop_assert_eq!(MoveAnswer::decode(&a, &p), Some(ans));
            }
        }
    }
}
