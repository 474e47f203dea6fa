//! Learning-curve families beside `curves.py`'s, for checking that a choice made on the
//! shared curves holds elsewhere: the same form (`floor + a * g(t) + noise`) with the optimum
//! moved and the crossing made milder or stronger. They played no part in choosing defaults.

use tune_search::Params;

use crate::curves::{config, noise, MAX_T};
use crate::simulator::Curves;

/// One family: where the optimum is (log10 lr, log2 width, dropout), the log10 lr at which
/// curves are half-way between slow and fast starters, and how much slow starters lag at t = 1.
struct Family {
    u_opt: f64,
    v_opt: f64,
    d_opt: f64,
    speed_centre: f64,
    crossing: f64,
}

/// (name, family); `curves.py` is u_opt -2.5, v_opt 7.5, d_opt 0.25, centre -2, crossing 0.6.
const FAMILIES: [(&str, Family); 3] = [
    (
        "mild crossing",
        Family {
            u_opt: -2.0,
            v_opt: 6.5,
            d_opt: 0.1,
            speed_centre: -2.0,
            crossing: 0.15,
        },
    ),
    (
        "fast-starting optimum",
        Family {
            u_opt: -1.5,
            v_opt: 8.5,
            d_opt: 0.4,
            speed_centre: -2.0,
            crossing: 0.6,
        },
    ),
    (
        "late bloomer",
        Family {
            u_opt: -3.2,
            v_opt: 5.5,
            d_opt: 0.05,
            speed_centre: -2.3,
            crossing: 0.8,
        },
    ),
];

impl Family {
    fn floor(&self, lr: f64, width: i64, dropout: f64) -> f64 {
        let (u, v) = (lr.log10(), (width as f64).log2());
        0.05 + 0.10 * (u - self.u_opt).powi(2)
            + 0.02 * (v - self.v_opt).powi(2)
            + 0.5 * (dropout - self.d_opt).powi(2)
    }

    fn floor_min(&self) -> f64 {
        let w = 2f64.powf(self.v_opt);
        let lr = 10f64.powf(self.u_opt);
        [w.floor() as i64, w.ceil() as i64]
            .into_iter()
            .map(|w| self.floor(lr, w, self.d_opt))
            .fold(f64::INFINITY, f64::min)
    }

    fn loss(&self, lr: f64, width: i64, dropout: f64, t: u64) -> f64 {
        let (u, v, d) = (lr.log10(), (width as f64).log2(), dropout);
        let s = 1.0 / (1.0 + (-3.0 * (u - self.speed_centre)).exp());
        let floor = self.floor(lr, width, dropout);
        let a = 0.3 + 0.5 * (floor - 0.05) + self.crossing * (1.0 - s) + 0.3 * d + 0.02 * (v - 4.0);
        let b = 0.5 + 0.6 * s - 0.3 * d;
        let big_t = MAX_T as f64;
        let g = ((t as f64).powf(-b) - big_t.powf(-b)) / (1.0 - big_t.powf(-b));
        floor + a * g + noise(lr, width, dropout, t)
    }
}

fn loss_of<const F: usize>(p: &Params, t: u64) -> f64 {
    let (lr, width, dropout) = config(p);
    FAMILIES[F].1.loss(lr, width, dropout, t)
}

fn regret_of<const F: usize>(p: &Params) -> f64 {
    let (lr, width, dropout) = config(p);
    let f = &FAMILIES[F].1;
    f.floor(lr, width, dropout) - f.floor_min()
}

/// The held-out families, named, over `curves::space()`.
pub fn all() -> Vec<(&'static str, Curves)> {
    vec![
        (
            FAMILIES[0].0,
            Curves {
                loss: loss_of::<0>,
                regret: regret_of::<0>,
            },
        ),
        (
            FAMILIES[1].0,
            Curves {
                loss: loss_of::<1>,
                regret: regret_of::<1>,
            },
        ),
        (
            FAMILIES[2].0,
            Curves {
                loss: loss_of::<2>,
                regret: regret_of::<2>,
            },
        ),
    ]
}
