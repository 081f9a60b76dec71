//! The rpipe remote-heap allocator against a reference model (a byte map of the
//! heap): random alloc/free traces for every policy. After every operation the
//! allocator's own validation passes, no two live allocations overlap, every byte is
//! accounted for, and the chosen block obeys the policy's rule (checked on the
//! model's free blocks before the allocation).

use firehose::api::rpipe::rmalloc::{FreeError, Policy, Rmalloc};
use proptest::prelude::*;

const ALIGN: usize = 8;

#[derive(Clone, Debug)]
enum Op {
    Alloc(usize),
    /// Free the live allocation with this index (mod live count).
    Free(usize),
    /// Free an offset that is not a live allocation start.
    BadFree(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0usize..300).prop_map(Op::Alloc),
        4 => any::<usize>().prop_map(Op::Free),
        1 => any::<usize>().prop_map(Op::BadFree),
    ]
}

/// Free blocks (start, len) of the model's byte map.
fn free_blocks(used: &[bool]) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let mut i = 0;
    while i < used.len() {
        if used[i] {
            i += 1;
            continue;
        }
        let s = i;
        while i < used.len() && !used[i] {
            i += 1;
        }
        v.push((s, i - s));
    }
    v
}

fn run(policy: Policy, size: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut h = Rmalloc::new(size, ALIGN, policy);
    let mut used = vec![false; h.size()];
    let mut live: Vec<(usize, usize)> = Vec::new();
    let mut cursor = 0usize;
    for o in ops {
        match *o {
            Op::Alloc(len) => {
                let need = h.rounded(len).unwrap();
                let blocks = free_blocks(&used);
                let fits: Vec<_> = blocks.iter().filter(|b| b.1 >= need).copied().collect();
                let got = h.alloc(len);
                match got {
                    None => {
                        // Next-fit may only fail if nothing fits anywhere.
                        prop_assert!(
                            fits.is_empty(),
                            "{policy:?}: refused {need} with {fits:?} free"
                        );
                    }
                    Some(at) => {
                        prop_assert!(at % ALIGN == 0 && at + need <= used.len());
                        prop_assert!(used[at..at + need].iter().all(|u| !u), "overlap at {at}");
                        let blk = *blocks.iter().find(|b| b.0 <= at && at < b.0 + b.1).unwrap();
                        match policy {
                            Policy::FirstFit => prop_assert_eq!(at, fits[0].0),
                            Policy::BestFit => {
                                let min = fits.iter().map(|b| b.1).min().unwrap();
                                prop_assert_eq!(blk.1, min);
                                prop_assert_eq!(at, blk.0);
                            }
                            Policy::WorstFit => {
                                let max = fits.iter().map(|b| b.1).max().unwrap();
                                prop_assert_eq!(blk.1, max);
                                prop_assert_eq!(at, blk.0);
                            }
                            Policy::NextFit => {
                                // The first place at/after the cursor (wrapping) with
                                // `need` free bytes in one block.
                                let cand = |b: &(usize, usize)| {
                                    let s = b.0.max(cursor);
                                    (s < b.0 + b.1 && b.0 + b.1 - s >= need).then_some(s)
                                };
                                let expect = blocks
                                    .iter()
                                    .filter(|b| b.0 + b.1 > cursor)
                                    .find_map(cand)
                                    .or_else(|| fits.first().map(|b| b.0));
                                prop_assert_eq!(Some(at), expect);
                            }
                        }
                        used[at..at + need].iter_mut().for_each(|u| *u = true);
                        live.push((at, need));
                        cursor = (at + need) % used.len();
                    }
                }
            }
            Op::Free(i) => {
                if live.is_empty() {
                    continue;
                }
                let (at, need) = live.swap_remove(i % live.len());
                prop_assert_eq!(h.free(at), Ok(need));
                used[at..at + need].iter_mut().for_each(|u| *u = false);
            }
            Op::BadFree(x) => {
                let off = x % (used.len() + 16);
                if live.iter().any(|&(a, _)| a == off) {
                    continue;
                }
                prop_assert_eq!(h.free(off), Err(FreeError::NotAllocated));
            }
        }
        h.validate().map_err(TestCaseError::fail)?;
        let free: usize = used.iter().filter(|u| !**u).count();
        prop_assert_eq!(h.free_bytes(), free);
        let largest = free_blocks(&used).iter().map(|b| b.1).max().unwrap_or(0);
        prop_assert_eq!(h.largest_free(), largest);
    }
    // Free everything: one block again (coalescing).
    for (at, _) in live {
        h.free(at).unwrap();
    }
    prop_assert_eq!(h.largest_free(), h.size());
    prop_assert_eq!(h.fragmentation(), 0.0);
    Ok(())
}

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![
        Just(Policy::NextFit),
        Just(Policy::FirstFit),
        Just(Policy::BestFit),
        Just(Policy::WorstFit)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]
    #[test]
    fn allocator_matches_the_model(p in policy(), size in 8usize..2048, ops in prop::collection::vec(op(), 1..120)) {
        run(p, size, &ops)?;
    }
}
