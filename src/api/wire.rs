//! AM frame encoding.
//!
//! Layout (little-endian), `HEADER` bytes then arguments then medium payload:
//! ```text
//!  0  magic u8 (0xA1)        1  kind u8 (category | REPLY | CONTROL)
//!  2  handler u8             3  nargs u8 (<= MAX_ARGS)
//!  4  credits u16 (returned flow-control credits)      6  reserved u16 (0)
//!  8  long destination u64 (long frames; else 0)
//! 16  medium payload length u32
//! 20  args: nargs x u64, then the medium payload
//! ```
//! Guarantees: `decode` accepts exactly what `encode` produces and rejects every
//! other byte string with a reason (never panics, never reads out of bounds); it is
//! fuzzed by proptest below and by the AM storm tests.

pub const MAGIC: u8 = 0xA1;
pub const HEADER: usize = 20;
pub const MAX_ARGS: usize = 16;

/// The library's AM handler indices (3..=127; 0..=2 unused, 128..=255 the
/// application's). Each subsystem registers the handlers of its ids with the
/// context (`api::context`); the engine never names a subsystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum LibHandler {
    /// `mem`: drop a range of the sender's memory from every cache, then ack.
    Invalidate = 3,
    /// `mem`: the acknowledgement.
    InvalAck = 4,
    /// Firehose: a move request (seed 000 §3.2).
    FhMove = 5,
    /// Firehose: the move's answer.
    FhAnswer = 6,
    /// rpipe: the open handshake.
    RpipeHello = 7,
    /// rpipe: the close handshake.
    RpipeBye = 8,
    /// VIS pack algorithm: a packed put (pieces and their bytes).
    VisPut = 9,
    /// VIS pack algorithm: a packed put's acknowledgement.
    VisAck = 10,
    /// VIS pack algorithm: a packed get (the pieces to gather).
    VisGet = 11,
    /// VIS pack algorithm: a packed get's reply (the gathered bytes).
    VisData = 12,
    /// Collective channels: a chunk for the reader's inbox (`sync::chan_am`).
    CollChunk = 13,
    /// Collective channels: a reader's credit for the writer.
    CollCredit = 14,
    /// Barriers: a flag for the reader's barrier slots (`sync::barrier`).
    BarrierFlag = 15,
}

/// Frame kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    Short = 0,
    Medium = 1,
    Long = 2,
}

const KIND_REPLY: u8 = 4;
const KIND_CONTROL: u8 = 8;

/// Control frames (no handler runs; they do not consume credits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Only returns credits.
    Credit = 0,
    /// The peer refused one of our AMs: args = [status code, handler index].
    Refused = 1,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Request,
    Reply,
    Control(Control),
}

/// A decoded frame borrowing the received bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    pub category: Category,
    pub role: Role,
    pub handler: u8,
    pub credits: u16,
    pub long_dst: u64,
    pub args: [u64; MAX_ARGS],
    pub nargs: usize,
    pub payload: &'a [u8],
}

impl Frame<'_> {
    pub fn args(&self) -> &[u64] {
        &self.args[..self.nargs]
    }
}

/// Bytes of a frame with `nargs` arguments and `plen` payload bytes.
#[inline]
pub fn frame_len(nargs: usize, plen: usize) -> usize {
    HEADER + 8 * nargs + plen
}

/// A frame's fixed fields: what [`encode`] and [`encode_into`] write before the
/// arguments and the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub category: Category,
    pub role: Role,
    pub handler: u8,
    /// Flow-control credits returned to the receiver.
    pub credits: u16,
    /// Long frames: where the payload goes at the receiver; else 0.
    pub long_dst: u64,
}

impl Head {
    /// The header and the arguments into `dst` (exactly `frame_len(args.len(), 0)`
    /// bytes), for a payload of `plen` bytes that follows them: the one place that
    /// knows the layout.
    #[inline]
    fn write(&self, dst: &mut [u8], args: &[u64], plen: usize) {
        debug_assert!(args.len() <= MAX_ARGS);
        debug_assert!(self.category == Category::Medium || plen == 0);
        debug_assert_eq!(dst.len(), frame_len(args.len(), 0));
        let (kind, handler) = match self.role {
            Role::Request => (self.category as u8, self.handler),
            Role::Reply => (self.category as u8 | KIND_REPLY, self.handler),
            Role::Control(c) => (KIND_CONTROL, c as u8),
        };
        let c = self.credits.to_le_bytes();
        dst[..8].copy_from_slice(&[MAGIC, kind, handler, args.len() as u8, c[0], c[1], 0, 0]);
        dst[8..16].copy_from_slice(&self.long_dst.to_le_bytes());
        dst[16..HEADER].copy_from_slice(&(plen as u32).to_le_bytes());
        for (d, x) in dst[HEADER..].chunks_exact_mut(8).zip(args) {
            d.copy_from_slice(&x.to_le_bytes());
        }
    }
}

/// Encode a frame into `buf` after `headroom` zero bytes (room for the conduit's own
/// prefix, so the frame is built once and never copied). The payload is appended, not
/// written over zeroes.
pub fn encode(buf: Vec<u8>, headroom: usize, h: &Head, args: &[u64], payload: &[u8]) -> Vec<u8> {
    let mut v = buf;
    v.clear();
    v.reserve(headroom + frame_len(args.len(), payload.len()));
    v.resize(headroom + frame_len(args.len(), 0), 0);
    h.write(&mut v[headroom..], args, payload.len());
    v.extend_from_slice(payload);
    v
}

/// Encode a frame into `dst`, which holds exactly [`frame_len`] bytes.
#[inline]
pub fn encode_into(dst: &mut [u8], h: &Head, args: &[u64], payload: &[u8]) {
    debug_assert_eq!(dst.len(), frame_len(args.len(), payload.len()));
    let (head, p) = dst.split_at_mut(frame_len(args.len(), 0));
    h.write(head, args, payload.len());
    if !payload.is_empty() {
        p.copy_from_slice(payload); // a call to memcpy: not for a short frame
    }
}

/// Decode a frame, or say why it is malformed. Inline: the `Frame` (its argument
/// array) is built in the caller's frame instead of being returned by copy.
#[inline]
pub fn decode(b: &[u8]) -> Result<Frame<'_>, &'static str> {
    if b.len() < HEADER {
        return Err("frame shorter than the header");
    }
    if b[0] != MAGIC {
        return Err("bad magic");
    }
    let kind = b[1];
    let handler = b[2];
    let nargs = b[3] as usize;
    if nargs > MAX_ARGS {
        return Err("too many arguments");
    }
    let credits = u16::from_le_bytes([b[4], b[5]]);
    if b[6] != 0 || b[7] != 0 {
        return Err("reserved bytes set");
    }
    let long_dst = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    let plen = u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")) as usize;
    let (category, role) = if kind & KIND_CONTROL != 0 {
        if kind != KIND_CONTROL {
            return Err("bad control kind");
        }
        let c = match handler {
            0 => Control::Credit,
            1 => Control::Refused,
            _ => return Err("unknown control frame"),
        };
        (Category::Short, Role::Control(c))
    } else {
        let cat = match kind & 3 {
            0 => Category::Short,
            1 => Category::Medium,
            2 => Category::Long,
            _ => return Err("bad category"),
        };
        if kind & !(3 | KIND_REPLY) != 0 {
            return Err("bad kind bits");
        }
        let role = if kind & KIND_REPLY != 0 {
            Role::Reply
        } else {
            Role::Request
        };
        (cat, role)
    };
    if category != Category::Medium && plen != 0 {
        return Err("payload on a non-medium frame");
    }
    if category != Category::Long && long_dst != 0 {
        return Err("destination on a non-long frame");
    }
    let need = HEADER + 8 * nargs + plen;
    if b.len() != need {
        return Err("length does not match header");
    }
    let mut args = [0u64; MAX_ARGS];
    for (i, a) in args.iter_mut().take(nargs).enumerate() {
        let o = HEADER + 8 * i;
        *a = u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    }
    Ok(Frame {
        category,
        role,
        handler,
        credits,
        long_dst,
        args,
        nargs,
        payload: &b[HEADER + 8 * nargs..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame from its fields, laid out as a test reads them.
    fn enc(
        category: Category,
        role: Role,
        handler: u8,
        credits: u16,
        long_dst: u64,
        args: &[u64],
        payload: &[u8],
    ) -> Vec<u8> {
        let h = Head {
            category,
            role,
            handler,
            credits,
            long_dst,
        };
        encode(Vec::new(), 0, &h, args, payload)
    }
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let f = enc(
            Category::Medium,
            Role::Reply,
            200,
            3,
            0,
            &[1, 2, u64::MAX],
            b"hello",
        );
        let d = decode(&f).unwrap();
        assert_eq!(d.category, Category::Medium);
        assert_eq!(d.role, Role::Reply);
        assert_eq!((d.handler, d.credits), (200, 3));
        assert_eq!(d.args(), &[1, 2, u64::MAX]);
        assert_eq!(d.payload, b"hello");
        let c = enc(
            Category::Short,
            Role::Control(Control::Refused),
            0,
            0,
            0,
            &[5, 130],
            &[],
        );
        assert_eq!(decode(&c).unwrap().role, Role::Control(Control::Refused));
    }

    #[test]
    fn rejects_corruption() {
        let f = enc(Category::Long, Role::Request, 9, 0, 0x1000, &[7], &[]);
        assert!(decode(&f).is_ok());
        assert!(decode(&f[..f.len() - 1]).is_err());
        let mut g = f.clone();
        g[3] = 17;
        assert!(decode(&g).is_err());
        let mut g = f.clone();
        g[1] = 3;
        assert!(decode(&g).is_err());
        let mut g = f.clone();
        g[16] = 1; // payload length on a long frame
        assert!(decode(&g).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn decode_of_mutated_frames_never_panics(
            args in proptest::collection::vec(any::<u64>(), 0..=MAX_ARGS),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
            pos in 0usize..400, val in any::<u8>()
        ) {
            let mut f = enc(Category::Medium, Role::Request, 1, 2, 0, &args, &payload);
            let ok = decode(&f).unwrap();
            prop_assert_eq!(ok.args(), &args[..]);
            prop_assert_eq!(ok.payload, &payload[..]);
            let p = pos % f.len();
            f[p] = val;
            let _ = decode(&f);
        }
    }
}
