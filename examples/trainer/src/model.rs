//! A small multilayer perceptron trained with SGD and momentum on a data set
//! generated from a seed. Everything is deterministic: the same seed and
//! step count give bit-identical weights, whether or not the run was
//! interrupted and resumed in between.

/// SplitMix64: small, seedable, and its whole state is one u64 to checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn symmetric(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

pub const INPUTS: usize = 8;
pub const HIDDEN: usize = 16;
pub const SAMPLES: usize = 1024;
pub const BATCH: usize = 32;
const LEARNING_RATE: f64 = 0.05;
const MOMENTUM: f64 = 0.9;

/// Parameter layout: w1 (HIDDEN x INPUTS), b1 (HIDDEN), w2 (HIDDEN), b2 (1).
pub const PARAMS: usize = HIDDEN * INPUTS + HIDDEN + HIDDEN + 1;

/// The training data: a fixed nonlinear rule over seeded inputs.
pub struct Data {
    pub x: Vec<[f64; INPUTS]>,
    pub y: Vec<f64>,
}

impl Data {
    pub fn generate(seed: u64) -> Data {
        let mut rng = Rng(seed ^ 0xDA7A);
        let mut x = Vec::with_capacity(SAMPLES);
        let mut y = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let mut v = [0.0; INPUTS];
            for f in &mut v {
                *f = rng.symmetric();
            }
            let label = if v[0] * v[1] + 0.5 * v[2] - v[3] * v[3] > 0.0 {
                1.0
            } else {
                0.0
            };
            x.push(v);
            y.push(label);
        }
        Data { x, y }
    }
}

/// Everything a resumed run needs to continue exactly where it stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    pub step: u64,
    pub rng: Rng,
    pub params: Vec<f64>,
    pub velocity: Vec<f64>,
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

impl State {
    pub fn initial(seed: u64) -> State {
        let mut rng = Rng(seed);
        let params = (0..PARAMS).map(|_| rng.symmetric() * 0.5).collect();
        State {
            step: 0,
            rng,
            params,
            velocity: vec![0.0; PARAMS],
        }
    }

    /// One SGD step on a mini-batch drawn from the state's generator; returns
    /// the batch's mean log loss.
    pub fn train_step(&mut self, data: &Data) -> f64 {
        let mut grad = vec![0.0; PARAMS];
        let mut loss = 0.0;
        let (w1, rest) = self.params.split_at(HIDDEN * INPUTS);
        let (b1, rest) = rest.split_at(HIDDEN);
        let (w2, b2) = rest.split_at(HIDDEN);
        for _ in 0..BATCH {
            let i = self.rng.below(SAMPLES);
            let (x, y) = (&data.x[i], data.y[i]);
            let mut hidden = [0.0; HIDDEN];
            for h in 0..HIDDEN {
                let z: f64 = (0..INPUTS).map(|k| w1[h * INPUTS + k] * x[k]).sum::<f64>() + b1[h];
                hidden[h] = z.tanh();
            }
            let out = sigmoid((0..HIDDEN).map(|h| w2[h] * hidden[h]).sum::<f64>() + b2[0]);
            loss -= y * out.max(1e-12).ln() + (1.0 - y) * (1.0 - out).max(1e-12).ln();
            let d_out = out - y;
            for h in 0..HIDDEN {
                let d_hidden = d_out * w2[h] * (1.0 - hidden[h] * hidden[h]);
                for k in 0..INPUTS {
                    grad[h * INPUTS + k] += d_hidden * x[k];
                }
                grad[HIDDEN * INPUTS + h] += d_hidden;
                grad[HIDDEN * INPUTS + HIDDEN + h] += d_out * hidden[h];
            }
            grad[PARAMS - 1] += d_out;
        }
        for ((p, v), g) in self
            .params
            .iter_mut()
            .zip(self.velocity.iter_mut())
            .zip(&grad)
        {
            *v = MOMENTUM * *v - LEARNING_RATE * g / BATCH as f64;
            *p += *v;
        }
        self.step += 1;
        loss / BATCH as f64
    }
}
