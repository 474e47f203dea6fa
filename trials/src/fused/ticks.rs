//! The tick schedule: which members train which update at each step of the pack.

use super::*;

/// Updates in lockstep: tick `i` is the `i`-th update of every member that trains that
/// many, each from where it is in its epoch. Each tick's batch holds the most rows any
/// member has in it, a member's shorter part (another batch size, an epoch's last batch)
/// padded with rows its loss weighs 0, and a member with fewer updates sits the last ticks
/// out.
pub(super) struct Ticks {
    /// Per tick, per member: its rows in the tick's batch (0: it sits the tick out).
    pub(super) lens: Vec<Vec<usize>>,
    /// Per tick: rows per member in its batch.
    pub(super) rows: Vec<usize>,
    /// Each tick's `K * rows` row indices, member after member, one tick after another
    /// from `offsets[i]`.
    pub(super) idx: Tensor,
    /// Each row's loss weight: -1 / its member's rows in the tick (as `nll` scales a batch's
    /// loss), 0 for padding.
    pub(super) weights: Tensor,
    /// Where some member's part of a tick is padded: 1 for a member's own row, 0 for
    /// padding.
    pub(super) own: Option<Tensor>,
    pub(super) offsets: Vec<usize>,
}

impl Ticks {
    /// For members whose epochs shuffle the `n` rows as `orders`, member `k` training
    /// `counts[k]` updates from its update `at[k]` of the epoch.
    pub(super) fn new(
        members: &[Trainer],
        at: &[u64],
        counts: &[u64],
        orders: &[&[u32]],
        n: usize,
        device: &Device,
    ) -> candle_core::Result<Ticks> {
        let sizes: Vec<usize> = members.iter().map(|m| m.cfg.batch_size).collect();
        let count = counts.iter().copied().max().unwrap_or(0) as usize;
        // Where member `m`'s batch of tick `i` starts in its epoch's order.
        let start = |m: usize, i: usize| ((at[m] as usize + i) * sizes[m]).min(n);
        let lens: Vec<Vec<usize>> = (0..count)
            .map(|i| {
                (0..members.len())
                    .map(|m| {
                        if i < counts[m] as usize {
                            sizes[m].min(n - start(m, i))
                        } else {
                            0
                        }
                    })
                    .collect()
            })
            .collect();
        let rows: Vec<usize> = lens
            .iter()
            .map(|l| l.iter().copied().max().unwrap_or(0))
            .collect();
        let (mut idx, mut weights, mut own, mut offsets) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, tick) in lens.iter().enumerate() {
            offsets.push(idx.len());
            for (m, &len) in tick.iter().enumerate() {
                let start = start(m, i);
                idx.extend_from_slice(&orders[m][start..start + len]);
                // Padding repeats the member's first row of the epoch; its weight is 0.
                idx.resize(idx.len() + rows[i] - len, orders[m][0]);
                weights.resize(weights.len() + len, (-1.0 / len as f64) as f32);
                weights.resize(weights.len() + rows[i] - len, 0.0);
                own.resize(own.len() + len, 1f32);
                own.resize(own.len() + rows[i] - len, 0.0);
            }
        }
        let total = idx.len();
        let padded = own.contains(&0.0);
        Ok(Ticks {
            idx: Tensor::from_vec(idx, total, device)?,
            weights: Tensor::from_vec(weights, total, device)?,
            own: if padded {
                Some(Tensor::from_vec(own, total, device)?)
            } else {
                None
            },
            offsets,
            lens,
            rows,
        })
    }

    pub(super) fn count(&self) -> usize {
        self.rows.len()
    }
}
