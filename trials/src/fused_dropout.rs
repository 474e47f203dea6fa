//! A pack's dropout masks, each member's drawn as it draws them alone ([`Dropout`]: batch by
//! batch, layer by layer, from its own ChaCha8 stream), an epoch's a chunk of ticks at a time.
//!
//! On CPU a thread of their own draws them on every core, a chunk ahead, as bytes (1: kept),
//! uploaded one chunk in one piece and scaled by each member's `1 / (1 - p)`. On a GPU that
//! was the host's bottleneck: 16 members' masks took the host longer to draw than the GPU
//! took to train the step they were for, and each chunk's upload from pageable memory waited
//! for the GPU's queue to drain. ChaCha is a counter-based generator, draw `e` of a stream a
//! function of its key, the stream and `e` alone, so there [`DrawMasks`] computes every value
//! of a chunk in a thread of its own (`fused_dropout.cu`): the same bits, from a table of
//! each member's stream and each block's place in it uploaded once an epoch.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::mpsc;

use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor};

use crate::model::{keeps, Dropout};

#[cfg(feature = "cuda")]
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused_dropout.ptx"));

/// A place where the forward pass drops units: the units there, and each member's part of
/// them, `(rows, units)` (`FusedTrainer::dropout_sites`).
pub(crate) type DropoutSite = (usize, Vec<(usize, usize)>);

/// An epoch's masks to draw: per tick, its rows and its dropout sites.
pub(crate) type MaskPlan = Vec<(usize, Vec<DropoutSite>)>;

/// The most mask values a chunk draws beyond its first tick (8 MB); a few ticks' in the
/// crate's tests, so that their epochs cross chunks.
#[cfg(not(test))]
const MASK_CHUNK: usize = 1 << 23;
#[cfg(test)]
const MASK_CHUNK: usize = 1 << 10;

/// The most blocks (a site of a tick) of a chunk: one launch of [`DrawMasks`] takes a
/// chunk, a block a row of its grid, and a CUDA grid has at most 65,535 rows (an epoch of
/// many small batches of a small pack had more in one chunk of [`MASK_CHUNK`] values).
const MAX_BLOCKS: usize = 65_535;

/// The ticks of each chunk of `plan`'s epoch for `members`: at least one tick each, and
/// ticks while fewer than [`MASK_CHUNK`] values were drawn, of at most [`MAX_BLOCKS`] blocks.
fn chunks(plan: &[(usize, Vec<DropoutSite>)], members: usize) -> Vec<Range<usize>> {
    chunks_of(plan, members, MASK_CHUNK, MAX_BLOCKS)
}

/// [`chunks`] of at most `values` values (beyond a chunk's first tick) and `most` blocks.
fn chunks_of(
    plan: &[(usize, Vec<DropoutSite>)],
    members: usize,
    values: usize,
    most: usize,
) -> Vec<Range<usize>> {
    let mut chunks = Vec::new();
    let mut t = 0;
    while t < plan.len() {
        let (first, mut size, mut blocks) = (t, 0, 0);
        while t < plan.len() && (t == first || (size < values && blocks + plan[t].1.len() <= most))
        {
            let (rows, sites) = &plan[t];
            size += sites
                .iter()
                .map(|(units, _)| members * rows * units)
                .sum::<usize>();
            blocks += sites.len();
            t += 1;
        }
        chunks.push(first..t);
    }
    chunks
}

/// An epoch's dropout masks, `(K, rows, units)` per site and tick, in order.
pub(crate) struct DropoutMasks {
    source: Source,
    members: usize,
    /// The drawn ticks' masks not yet used, one per dropout site.
    ready: VecDeque<Vec<Tensor>>,
}

enum Source {
    /// Drawn on the host's threads, a chunk ahead.
    Host {
        chunks: mpsc::Receiver<MaskChunk>,
        /// Each member's scale of the units it keeps, `(1, K, 1, 1)`.
        scales: Tensor,
    },
    /// Drawn on the device ([`DrawMasks`]) a chunk at a time.
    Device {
        /// The epoch's [`MaskTable`].
        table: Tensor,
        /// Per tick: its rows and its sites' units.
        ticks: Vec<(usize, Vec<usize>)>,
        /// Each chunk's ticks, the next first.
        chunks: std::vec::IntoIter<Range<usize>>,
        /// Where each block's values start in the epoch's, and the epoch's count last.
        starts: Vec<u64>,
    },
}

/// Consecutive ticks' masks: the values, site after site and tick after tick, and each
/// tick's rows and its sites' units.
struct MaskChunk {
    keep: Vec<u8>,
    ticks: Vec<(usize, Vec<usize>)>,
}

impl DropoutMasks {
    /// Starts drawing the masks of an epoch of `plan` for the members that drop as
    /// `dropouts` (each at the start of its epoch's stream): on the device where `on_device`
    /// (a GPU), otherwise on the host.
    pub(crate) fn new(
        dropouts: Vec<Dropout>,
        plan: MaskPlan,
        device: &Device,
        on_device: bool,
    ) -> candle_core::Result<DropoutMasks> {
        let members = dropouts.len();
        let source = if on_device {
            let table = MaskTable::new(&dropouts, &plan)?;
            let len = table.words.len();
            Source::Device {
                table: Tensor::from_vec(table.words, len, device)?,
                chunks: chunks(&plan, members).into_iter(),
                ticks: tick_units(&plan),
                starts: table.starts,
            }
        } else {
            let scales: Vec<f32> = dropouts.iter().map(Dropout::scale).collect();
            let scales = Tensor::from_vec(scales, (1, members, 1, 1), device)?;
            // One chunk drawn ahead of the one in use.
            let (send, chunks) = mpsc::sync_channel(1);
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            std::thread::Builder::new()
                .name("tune-dropout".into())
                .spawn(move || draw_chunks(dropouts, &plan, threads, &send))
                .map_err(candle_core::Error::wrap)?;
            Source::Host { chunks, scales }
        };
        Ok(DropoutMasks {
            source,
            members,
            ready: VecDeque::new(),
        })
    }

    /// The next tick's masks, `(K, rows, units)` per site.
    pub(crate) fn next(&mut self) -> candle_core::Result<Vec<Tensor>> {
        if self.ready.is_empty() {
            let ran_out = || candle_core::Error::Msg("the dropout masks ran out".into());
            let (values, ticks, scales) = match &mut self.source {
                Source::Host { chunks, scales } => {
                    let chunk = chunks.recv().map_err(|_| ran_out())?;
                    let total = chunk.keep.len();
                    let keep = Tensor::from_vec(chunk.keep, total, scales.device())?;
                    (keep.to_dtype(DType::F32)?, chunk.ticks, Some(&*scales))
                }
                Source::Device {
                    table,
                    ticks,
                    chunks,
                    starts,
                } => {
                    let chunk = chunks.next().ok_or_else(ran_out)?;
                    let blocks = block_range(ticks, &chunk);
                    let op = DrawMasks {
                        members: self.members,
                        values: starts[blocks.start]..starts[blocks.end],
                        largest: ticks[chunk.clone()]
                            .iter()
                            .flat_map(|(rows, units)| units.iter().map(move |u| rows * u))
                            .max()
                            .unwrap_or(0)
                            * self.members,
                        blocks,
                    };
                    let values = table.apply_op1_no_bwd(&op)?;
                    (values, ticks[chunk].to_vec(), None)
                }
            };
            self.ready
                .extend(split_ticks(&values, ticks, self.members, scales)?);
        }
        self.ready
            .pop_front()
            .ok_or_else(|| candle_core::Error::Msg("an empty chunk of dropout masks".into()))
    }
}

/// Per tick of `plan`: its rows and its sites' units.
fn tick_units(plan: &[(usize, Vec<DropoutSite>)]) -> Vec<(usize, Vec<usize>)> {
    plan.iter()
        .map(|(rows, sites)| (*rows, sites.iter().map(|s| s.0).collect()))
        .collect()
}

/// The blocks (a site of a tick, in order) of `chunk`'s ticks.
fn block_range(ticks: &[(usize, Vec<usize>)], chunk: &Range<usize>) -> Range<usize> {
    let before: usize = ticks[..chunk.start].iter().map(|(_, u)| u.len()).sum();
    let within: usize = ticks[chunk.clone()].iter().map(|(_, u)| u.len()).sum();
    before..before + within
}

/// A chunk's `values` as each tick's masks, `(K, rows, units)` a site, scaled by `scales`
/// where given. A run of equal blocks (an MLP's sites, tick after tick) is scaled in one
/// operation: a kernel per site and tick was a good part of a small pack's batch.
fn split_ticks(
    values: &Tensor,
    ticks: Vec<(usize, Vec<usize>)>,
    members: usize,
    scales: Option<&Tensor>,
) -> candle_core::Result<Vec<Vec<Tensor>>> {
    let blocks: Vec<(usize, usize)> = ticks
        .iter()
        .flat_map(|(rows, units)| units.iter().map(move |&u| (*rows, u)))
        .collect();
    let mut masks = Vec::with_capacity(blocks.len());
    let (mut at, mut b) = (0, 0);
    while b < blocks.len() {
        let run = blocks[b..].iter().take_while(|&&x| x == blocks[b]).count();
        let (rows, units) = blocks[b];
        let size = members * rows * units;
        let mut run_masks = values
            .narrow(0, at, run * size)?
            .reshape((run, members, rows, units))?;
        if let Some(scales) = scales {
            run_masks = run_masks.broadcast_mul(scales)?;
        }
        for r in 0..run {
            masks.push(run_masks.get(r)?);
        }
        at += run * size;
        b += run;
    }
    let mut masks = masks.into_iter();
    Ok(ticks
        .into_iter()
        .map(|(_, units)| masks.by_ref().take(units.len()).collect())
        .collect())
}

/// The masks' thread: draws `plan`'s ticks in order, a chunk at a time, until done or the
/// epoch no longer listens (it failed). The members' streams are independent, so each
/// chunk's members are drawn on up to `threads` threads: one thread drawing 16 members'
/// masks took longer than a GPU takes to train the step they are for.
fn draw_chunks(
    mut dropouts: Vec<Dropout>,
    plan: &[(usize, Vec<DropoutSite>)],
    threads: usize,
    send: &mpsc::SyncSender<MaskChunk>,
) {
    let per_thread = dropouts.len().div_ceil(threads.max(1)).max(1);
    for chunk in chunks(plan, dropouts.len()) {
        let ticks = &plan[chunk];
        let drawn: Option<Vec<Vec<u8>>> = std::thread::scope(|scope| {
            let groups: Vec<_> = dropouts
                .chunks_mut(per_thread)
                .enumerate()
                .map(|(g, group)| {
                    scope.spawn(move || {
                        group
                            .iter_mut()
                            .enumerate()
                            .map(|(i, d)| draw_member(d, g * per_thread + i, ticks))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let mut drawn = Vec::new();
            for group in groups {
                drawn.extend(group.join().ok()?);
            }
            Some(drawn)
        });
        // A drawing thread that panicked ends the epoch's masks: it fails ("ran out").
        let Some(drawn) = drawn else { return };
        // Tick after tick, site after site, member after member: `(K, rows, units)` a site.
        let mut keep = Vec::new();
        let mut at = vec![0; drawn.len()];
        for (rows, sites) in ticks {
            for (units, _) in sites {
                let n = rows * units;
                for (own, at) in drawn.iter().zip(&mut at) {
                    keep.extend_from_slice(&own[*at..*at + n]);
                    *at += n;
                }
            }
        }
        let chunk = MaskChunk {
            keep,
            ticks: tick_units(ticks),
        };
        if send.send(chunk).is_err() {
            return;
        }
    }
}

/// Member `k`'s part of every site of `ticks`, one `(rows, units)` block after another, in
/// the order it draws them alone: its own rows and units drawn, its padding 0, and 1 where
/// it draws nothing (a part whose result is discarded).
fn draw_member(d: &mut Dropout, k: usize, ticks: &[(usize, Vec<DropoutSite>)]) -> Vec<u8> {
    let mut keep = Vec::new();
    for (rows, sites) in ticks {
        for (units, parts) in sites {
            let (rows, units, (own_rows, own_units)) = (*rows, *units, parts[k]);
            if own_rows == 0 {
                keep.resize(keep.len() + rows * units, 1);
            } else if own_units == units {
                d.extend_keep(&mut keep, own_rows * units);
                keep.resize(keep.len() + (rows - own_rows) * units, 0);
            } else {
                let mut own = Vec::with_capacity(own_rows * own_units);
                d.extend_keep(&mut own, own_rows * own_units);
                for row in own.chunks(own_units) {
                    keep.extend_from_slice(row);
                    keep.resize(keep.len() + units - own_units, 0);
                }
                keep.resize(keep.len() + (rows - own_rows) * units, 0);
            }
        }
    }
    keep
}

/// Words of a member's row of a [`MaskTable`]: its key (8), stream (2), threshold (2) and
/// scale's bits (1), and 3 unused.
const MEMBER_WORDS: usize = 16;
/// Words of a block's head: its rows and units, and where its values start in the epoch's (2).
const BLOCK_HEAD: usize = 4;
/// Words of a member's part of a block: its own rows and units, and its first draw's place
/// in its stream (2).
const PART_WORDS: usize = 4;

/// What [`DrawMasks`] reads, as `u32` words: each member's row ([`MEMBER_WORDS`]), then
/// each block's (a site of a tick, in the order drawn) head and each member's part of it.
struct MaskTable {
    words: Vec<u32>,
    /// Where each block's values start in the epoch's, and the epoch's count last.
    starts: Vec<u64>,
}

impl MaskTable {
    fn new(dropouts: &[Dropout], plan: &[(usize, Vec<DropoutSite>)]) -> candle_core::Result<Self> {
        let members = dropouts.len();
        let word = |n: usize, what: &str| {
            u32::try_from(n).map_err(|_| {
                candle_core::Error::Msg(format!("dropout masks: {what} {n} exceed a u32"))
            })
        };
        let mut words = Vec::new();
        let counters: Vec<_> = dropouts.iter().map(Dropout::counter).collect();
        for c in &counters {
            words.extend_from_slice(&c.key);
            words.extend_from_slice(&split(c.stream));
            words.extend_from_slice(&split(c.threshold));
            words.extend_from_slice(&[c.scale.to_bits(), 0, 0, 0]);
        }
        let mut next: Vec<u64> = counters.iter().map(|c| c.next).collect();
        let mut starts = vec![0u64];
        for (rows, sites) in plan {
            for (units, parts) in sites {
                let start = *starts.last().unwrap_or(&0);
                words.extend_from_slice(&[word(*rows, "rows")?, word(*units, "units")?]);
                words.extend_from_slice(&split(start));
                for ((&(own_rows, own_units), at), c) in parts.iter().zip(&mut next).zip(&counters)
                {
                    words.extend_from_slice(&[word(own_rows, "rows")?, word(own_units, "units")?]);
                    words.extend_from_slice(&split(*at));
                    // A member that keeps all draws nothing (`Dropout::extend_keep`).
                    if c.threshold != 0 {
                        *at += (own_rows * own_units) as u64;
                    }
                }
                starts.push(start + (members * rows * units) as u64);
            }
        }
        Ok(MaskTable { words, starts })
    }
}

/// `x` as its low and high words.
fn split(x: u64) -> [u32; 2] {
    [x as u32, (x >> 32) as u32]
}

fn join(words: &[u32]) -> u64 {
    u64::from(words[0]) | (u64::from(words[1]) << 32)
}

/// ChaCha8's (rand_chacha's `ChaCha8Rng`'s) `u64` at position `e` of `stream` under `key`:
/// words `2e` and `2e + 1` of its keystream, low first. The kernel's `chacha8_u64`.
fn chacha8_u64(key: &[u32], stream: u64, e: u64) -> u64 {
    let block = e / 8;
    let w = (e % 8) as usize * 2;
    let mut input = [0u32; 16];
    input[..4].copy_from_slice(&[0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]);
    input[4..12].copy_from_slice(&key[..8]);
    input[12..14].copy_from_slice(&split(block));
    input[14..].copy_from_slice(&split(stream));
    let mut x = input;
    let quarter = |x: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize| {
        x[a] = x[a].wrapping_add(x[b]);
        x[d] = (x[d] ^ x[a]).rotate_left(16);
        x[c] = x[c].wrapping_add(x[d]);
        x[b] = (x[b] ^ x[c]).rotate_left(12);
        x[a] = x[a].wrapping_add(x[b]);
        x[d] = (x[d] ^ x[a]).rotate_left(8);
        x[c] = x[c].wrapping_add(x[d]);
        x[b] = (x[b] ^ x[c]).rotate_left(7);
    };
    // ChaCha8: four double rounds.
    for _ in 0..4 {
        quarter(&mut x, 0, 4, 8, 12);
        quarter(&mut x, 1, 5, 9, 13);
        quarter(&mut x, 2, 6, 10, 14);
        quarter(&mut x, 3, 7, 11, 15);
        quarter(&mut x, 0, 5, 10, 15);
        quarter(&mut x, 1, 6, 11, 12);
        quarter(&mut x, 2, 7, 8, 13);
        quarter(&mut x, 3, 4, 9, 14);
    }
    let lo = x[w].wrapping_add(input[w]);
    let hi = x[w + 1].wrapping_add(input[w + 1]);
    join(&[lo, hi])
}

/// Value `(r, u)` of a member (its `member` row of the table) in a block where its part is
/// `part`: its scale where kept, 0 where dropped or padding, and its scale where it has no
/// rows (a part whose result is discarded, as the host draws it). The kernel's `value`.
fn value(member: &[u32], part: &[u32], r: u64, u: u64) -> f32 {
    let scale = f32::from_bits(member[12]);
    let (own_rows, own_units) = (u64::from(part[0]), u64::from(part[1]));
    if own_rows == 0 {
        return scale;
    }
    if r >= own_rows || u >= own_units {
        return 0.0;
    }
    let threshold = join(&member[10..12]);
    if threshold == 0 {
        return scale;
    }
    let e = join(&part[2..4]) + r * own_units + u;
    if keeps(
        chacha8_u64(&member[..8], join(&member[8..10]), e),
        threshold,
    ) {
        scale
    } else {
        0.0
    }
}

/// Applied to a [`MaskTable`] (`u32`): the values of `blocks`, `(K, rows, units)` a block,
/// one block after another (`values` of the epoch's).
struct DrawMasks {
    members: usize,
    blocks: Range<usize>,
    values: Range<u64>,
    /// The most values of a block (a launch's grid covers them).
    largest: usize,
}

impl DrawMasks {
    /// The table's words this op reads, checked against its length.
    fn check(&self, l: &Layout) -> candle_core::Result<Range<usize>> {
        let run = crate::fused_step::contiguous_run("dropout-masks", l, "the table")?;
        let needed = self.members * MEMBER_WORDS
            + self.blocks.end * (BLOCK_HEAD + PART_WORDS * self.members);
        if run.len() < needed {
            candle_core::bail!(
                "dropout-masks: a table of {} words for {} members and {} blocks (needs {needed})",
                run.len(),
                self.members,
                self.blocks.end
            );
        }
        Ok(run)
    }

    fn count(&self) -> usize {
        (self.values.end - self.values.start) as usize
    }
}

impl CustomOp1 for DrawMasks {
    fn name(&self) -> &'static str {
        "dropout-masks"
    }

    fn cpu_fwd(&self, t: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let table = &t.as_slice::<u32>()?[self.check(l)?];
        let (members, block_words) = (self.members, BLOCK_HEAD + PART_WORDS * self.members);
        let mut out = Vec::with_capacity(self.count());
        for b in self.blocks.clone() {
            let head = &table[members * MEMBER_WORDS + b * block_words..][..block_words];
            let (rows, units) = (u64::from(head[0]), u64::from(head[1]));
            if join(&head[2..4]) != self.values.start + out.len() as u64
                || (members as u64 * rows * units) as usize > self.largest
            {
                candle_core::bail!("dropout-masks: block {b} is not what the table says");
            }
            for k in 0..members {
                let member = &table[k * MEMBER_WORDS..][..MEMBER_WORDS];
                let part = &head[BLOCK_HEAD + k * PART_WORDS..][..PART_WORDS];
                for r in 0..rows {
                    for u in 0..units {
                        out.push(value(member, part, r, u));
                    }
                }
            }
        }
        if out.len() != self.count() {
            candle_core::bail!("dropout-masks: {} values, not {}", out.len(), self.count());
        }
        let n = out.len();
        Ok((CpuStorage::F32(out), Shape::from(n)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        t: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::cuda_backend::cudarc::driver::{LaunchConfig, PushKernelArg};
        use candle_core::cuda_backend::WrapErr;

        let run = self.check(l)?;
        let device = t.device.clone();
        let table = t.as_cuda_slice::<u32>()?.slice(run);
        let func = crate::cuda_kernel::Kernel::load(
            &device,
            "dropout_masks_f32",
            "tune_fused_dropout",
            PTX,
        )?;
        let n = self.count();
        // SAFETY: the kernel writes every value of its blocks, which are `values`.
        let out = unsafe { device.alloc::<f32>(n)? };
        if n > 0 {
            let (members, first_block, start) = (
                self.members as u32,
                self.blocks.start as u32,
                self.values.start,
            );
            let config = LaunchConfig {
                grid_dim: (
                    self.largest.div_ceil(THREADS as usize).clamp(1, 65_535) as u32,
                    self.blocks.len() as u32,
                    1,
                ),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut builder = func.builder();
            builder
                .arg(&members)
                .arg(&first_block)
                .arg(&start)
                .arg(&table)
                .arg(&out);
            // SAFETY: the arguments match the kernel's signature in fused_dropout.cu, and
            // `check` saw the table hold every block the launch reads.
            unsafe { builder.launch(config) }.w()?;
        }
        Ok((
            candle_core::CudaStorage::wrap_cuda_slice(out, device),
            Shape::from(n),
        ))
    }
}

/// Threads per block of the CUDA kernel.
#[cfg(feature = "cuda")]
const THREADS: u32 = 256;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::{RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The counter-based form is rand_chacha's stream: from its start, across its 4-block
    /// buffers, and far into it (a block counter past 32 bits), for a seed's streams.
    #[test]
    fn chacha8_at_any_position_is_rand_chachas_stream() {
        for (seed, stream) in [(0u64, 0u64), (7, (1 << 32) + 3), (u64::MAX, u64::MAX)] {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            rng.set_stream(stream);
            let d = Dropout::new(0.5, seed, 0);
            let key: Vec<u32> = rng
                .get_seed()
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            assert_eq!(d.counter().next, 0);
            for e in 0..100 {
                assert_eq!(
                    chacha8_u64(&key, stream, e),
                    rng.next_u64(),
                    "seed {seed}, draw {e}"
                );
            }
            let far = (1u64 << 35) + 13;
            rng.set_word_pos(u128::from(far) * 2);
            for e in far..far + 20 {
                assert_eq!(
                    chacha8_u64(&key, stream, e),
                    rng.next_u64(),
                    "seed {seed}, draw {e}"
                );
            }
        }
    }

    /// `Dropout`'s counter names its own stream: its key, stream and position after draws.
    #[test]
    fn a_dropouts_counter_is_where_it_draws_next() {
        let mut d = Dropout::new(0.3, 11, 4);
        let mut keep = Vec::new();
        d.extend_keep(&mut keep, 37);
        let c = d.counter();
        assert_eq!(c.next, 37);
        let mut more = Vec::new();
        d.extend_keep(&mut more, 50);
        for (i, &k) in more.iter().enumerate() {
            let draw = chacha8_u64(&c.key, c.stream, c.next + i as u64);
            assert_eq!(k == 1, keeps(draw, c.threshold), "draw {i}");
        }
        assert!(more.contains(&0) && more.contains(&1));
        assert_eq!(c.scale, d.scale());
    }

    /// Skipping draws leaves a dropout where drawing them would.
    #[test]
    fn skipping_draws_is_drawing_them() {
        let (mut drawn, mut skipped) = (Dropout::new(0.3, 11, 4), Dropout::new(0.3, 11, 4));
        drawn.extend_keep(&mut Vec::new(), 37);
        skipped.skip(37);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        drawn.extend_keep(&mut a, 50);
        skipped.extend_keep(&mut b, 50);
        assert_eq!(a, b);
        assert_eq!(skipped.counter().next, 87);
    }

    /// A threshold at an exact multiple of 2^-53 keeps a draw at it, as `random::<f64>() >=
    /// p` does, and one just under it does not.
    #[test]
    fn the_threshold_is_rands_float_comparison() {
        for p in [0.25, 0.5, 0.1, 0.3, 1e-17, 0.999_999] {
            let d = Dropout::new(p, 0, 0);
            let t = d.counter().threshold;
            for m in [t.saturating_sub(1), t, t + 1] {
                let draw = m << 11 | 0x7ff;
                let as_float = (draw >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
                assert_eq!(keeps(draw, t), as_float >= p, "p {p}, m {m}");
            }
        }
        assert_eq!(Dropout::new(0.0, 0, 0).counter().threshold, 0);
    }

    /// Three members: one that drops half, one that keeps all, one that starts mid-stream.
    pub(crate) fn dropouts() -> Vec<Dropout> {
        let mut mid = Dropout::new(0.4, 3, 1);
        mid.extend_keep(&mut Vec::new(), 5);
        vec![Dropout::new(0.5, 1, 0), Dropout::new(0.0, 2, 0), mid]
    }

    /// 7 ticks of two sites where the three members' parts are padded in rows, units or both,
    /// or absent.
    pub(crate) fn padded_plan() -> MaskPlan {
        (0..7)
            .map(|t| {
                let rows = 6 + t % 2;
                (
                    rows,
                    vec![
                        (9, vec![(rows, 9), (rows - 1, 9), (rows, 4)]),
                        (5, vec![(rows - 2, 3), (rows, 5), (0, 0)]),
                    ],
                )
            })
            .collect()
    }

    /// Members of every kind (padded rows and units, a member without the site, one that
    /// keeps all, one that starts mid-stream): the op's values are the host's, to the bit,
    /// chunk after chunk, and a table that is too short is an error, not a panic.
    #[test]
    fn masks_drawn_from_the_table_are_the_hosts() {
        let plan = padded_plan();
        let host = masks(dropouts(), plan.clone(), &Device::Cpu, false);
        let device = masks(dropouts(), plan.clone(), &Device::Cpu, true);
        assert_eq!(host, device);
        assert!(
            host.iter().flatten().any(|&v| v == 0.0) && host.iter().flatten().any(|&v| v == 2.0)
        );
        assert!(chunks(&plan, 3).len() > 1, "the epoch spans several chunks");

        let table = MaskTable::new(&dropouts(), &plan).unwrap();
        let short = Tensor::from_vec(table.words[..100].to_vec(), 100, &Device::Cpu).unwrap();
        let op = DrawMasks {
            members: 3,
            blocks: 0..14,
            values: 0..table.starts[14],
            largest: 3 * 7 * 9,
        };
        let err = short.apply_op1_no_bwd(&op).unwrap_err().to_string();
        assert!(err.contains("a table of 100 words"), "{err}");
    }

    /// An epoch of many one-value blocks is cut into chunks of at most a grid's rows of
    /// blocks, however few values they hold, each tick whole.
    #[test]
    fn a_chunk_holds_at_most_a_grids_rows_of_blocks() {
        let plan: MaskPlan = (0..40_000)
            .map(|_| (1, vec![(1, vec![(1, 1)]), (1, vec![(1, 1)])]))
            .collect();
        // This build's chunks hold few values: the production bound on values, which these
        // blocks stay far under.
        let cut = chunks_of(&plan, 1, 1 << 23, MAX_BLOCKS);
        let blocks = |c: &Range<usize>| c.len() * 2;
        assert!(cut.len() > 1);
        assert!(cut.iter().all(|c| blocks(c) <= MAX_BLOCKS), "{cut:?}");
        assert_eq!(cut.first().map(|c| c.start), Some(0));
        assert!(cut.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(cut.last().map(|c| c.end), Some(40_000));
    }

    /// The members' masks drawn on several threads are, byte for byte, those drawn on one.
    #[test]
    fn masks_drawn_on_several_threads_are_those_drawn_on_one() {
        let plan = padded_plan();
        let drawn = |threads: usize| {
            let (send, chunks) = mpsc::sync_channel(64);
            draw_chunks(dropouts(), &plan, threads, &send);
            drop(send);
            chunks.iter().map(|c| (c.keep, c.ticks)).collect::<Vec<_>>()
        };
        let one = drawn(1);
        assert!(one.len() > 1, "the test's epoch spans several chunks");
        for threads in [2, 3, 8] {
            assert!(drawn(threads) == one, "{threads} threads");
        }
    }

    /// Every tick's masks of `plan` on `device`, drawn on the host or through the table, as
    /// values.
    pub(crate) fn masks(
        dropouts: Vec<Dropout>,
        plan: MaskPlan,
        device: &Device,
        on_device: bool,
    ) -> Vec<Vec<f32>> {
        let sites: Vec<usize> = plan.iter().map(|(_, s)| s.len()).collect();
        let mut masks = DropoutMasks::new(dropouts, plan, device, on_device).unwrap();
        let mut all = Vec::new();
        for count in sites {
            let tick = masks.next().unwrap();
            assert_eq!(tick.len(), count);
            for m in tick {
                all.push(m.flatten_all().unwrap().to_vec1::<f32>().unwrap());
            }
        }
        all
    }
}
