//! Search spaces: Schedule IR points for `#[kernel]`s, knob assignments for `tile!` kernels.

use super::{Strategy, TrialConfig};
use tessera_ir::cost::{Point, Problem};
use tessera_ir::schedule::{self, KernelClass, Schedule};

/// A tile shape given as a tuple or an array.
pub trait IntoTile {
    fn into_tile(self) -> Vec<u32>;
}
impl IntoTile for (u32, u32, u32) {
    fn into_tile(self) -> Vec<u32> {
        vec![self.0, self.1, self.2]
    }
}
impl IntoTile for (u32, u32) {
    fn into_tile(self) -> Vec<u32> {
        vec![self.0, self.1]
    }
}
impl<const N: usize> IntoTile for [u32; N] {
    fn into_tile(self) -> Vec<u32> {
        self.to_vec()
    }
}

/// The cost model's problem of a `tile!` launch, from its arguments' shapes (in order).
pub type ProblemOf = fn(&[Vec<usize>]) -> Problem;

/// Whether the cost model ranks candidates — the seeds' `schedule.autotune(cost_model = ...)`.
///
/// With [`CostModel::Roofline`] (the default) the model's estimate ranks the candidates: the
/// hybrid strategy's priors and surrogate start from it, the search stops once a measured time
/// reaches the roofline bound, and a device without a clock picks the best-predicted candidate
/// that passed the check. With [`CostModel::Off`] every runnable candidate is ranked equal and
/// the search is driven by measurements alone (use it where the model misleads, e.g. on an
/// arch it has no table for); a device without a clock (the simulator) can only rank by the
/// model, so there it picks the best-predicted checked candidate either way. Either way candidates that cannot run on the arch (shared memory
/// or registers over its limits, spills) are skipped: that is a resource check, not an
/// estimate.
///
/// ```
/// use tessera::autotune::CostModel;
/// assert_eq!(CostModel::parse("roofline"), Some(CostModel::Roofline));
/// assert_eq!(CostModel::parse("none"), Some(CostModel::Off));
/// assert_eq!(CostModel::default(), CostModel::Roofline);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CostModel {
    /// Roofline time, occupancy and register pressure rank the candidates.
    #[default]
    Roofline,
    /// Measurements alone.
    Off,
}

impl CostModel {
    /// Parses `roofline`, or `none` / `off`.
    pub fn parse(s: &str) -> Option<CostModel> {
        match s.trim().to_ascii_lowercase().as_str() {
            "roofline" => Some(CostModel::Roofline),
            "none" | "off" => Some(CostModel::Off),
            _ => None,
        }
    }
}

/// The search space of a `#[kernel]`'s fused kernels, with the strategy and budget: the
/// product of `tiles × vectorize × stages × warps` (an empty list keeps the default's value),
/// each point checked by the Schedule IR verifier; the default schedule is always included
/// (first) as the correctness reference.
///
/// ```
/// use tessera::autotune::SearchSpace;
/// use tessera::ir::{DType, schedule::{KernelClass, Schedule}};
/// let d = Schedule::default_for(KernelClass::Matmul, DType::F32);
/// let s = SearchSpace::new().tiles([(64, 64, 32), (128, 128, 64)]).stages([2, 3]);
/// let pts = s.schedules(&d);
/// assert_eq!(pts[0], d);
/// assert_eq!(pts.len(), 4);   // 2 tiles × 2 stages, the default among them
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct SearchSpace {
    /// Tiles to try (`[BM, BN, BK]` for matmuls); empty: the default's.
    pub tiles: Vec<Vec<u32>>,
    /// Vector widths to try, in elements; empty: the default's.
    pub vectorize: Vec<u32>,
    /// Pipeline stages to try (shared-memory buffers in flight); empty: the default's.
    pub stages: Vec<u32>,
    /// Warps per block to try; empty: the default's.
    pub warps: Vec<u32>,
    /// Fusion depths to try (most elementwise ops per kernel epilogue); empty: every depth
    /// from 0 to the graph's deepest fusion. See the module docs of [`crate::autotune`].
    pub fusion_depths: Vec<u32>,
    /// How the space is explored.
    pub strategy: Strategy,
    /// Whether the cost model ranks the candidates.
    pub cost_model: CostModel,
    /// Trial budget; `None`: a quarter of the valid candidates (at least 4) for the hybrid and
    /// random strategies, all of them for the grid.
    pub max_trials: Option<usize>,
    /// How each candidate is timed.
    pub trial: TrialConfig,
}

impl Default for SearchSpace {
    fn default() -> Self {
        SearchSpace::new()
    }
}

impl SearchSpace {
    /// An empty space (the built-in tiles of the kernel class are used until `tiles` is set).
    pub fn new() -> Self {
        SearchSpace {
            tiles: Vec::new(),
            vectorize: Vec::new(),
            stages: Vec::new(),
            warps: Vec::new(),
            fusion_depths: Vec::new(),
            strategy: Strategy::Hybrid,
            cost_model: CostModel::Roofline,
            max_trials: None,
            trial: TrialConfig::default(),
        }
    }

    /// Fusion depths (0: no epilogue fusion; the graph's deepest when larger).
    pub fn fusion_depths(mut self, d: impl IntoIterator<Item = u32>) -> Self {
        self.fusion_depths = d.into_iter().collect();
        self
    }

    /// Tile shapes `(BM, BN, BK)` (matmul) or `(rows, cols)`.
    pub fn tiles<T: IntoTile>(mut self, t: impl IntoIterator<Item = T>) -> Self {
        self.tiles = t.into_iter().map(IntoTile::into_tile).collect();
        self
    }
    /// Vector widths.
    pub fn vectorize(mut self, v: impl IntoIterator<Item = u32>) -> Self {
        self.vectorize = v.into_iter().collect();
        self
    }
    /// Pipeline stages.
    pub fn stages(mut self, v: impl IntoIterator<Item = u32>) -> Self {
        self.stages = v.into_iter().collect();
        self
    }
    /// Warps per block.
    pub fn warps(mut self, v: impl IntoIterator<Item = u32>) -> Self {
        self.warps = v.into_iter().collect();
        self
    }
    /// The strategy.
    pub fn strategy(mut self, s: Strategy) -> Self {
        self.strategy = s;
        self
    }
    /// Whether the cost model ranks the candidates.
    pub fn cost_model(mut self, c: CostModel) -> Self {
        self.cost_model = c;
        self
    }
    /// The trial budget.
    pub fn max_trials(mut self, n: usize) -> Self {
        self.max_trials = Some(n);
        self
    }
    /// How candidates are timed.
    pub fn trial(mut self, t: TrialConfig) -> Self {
        self.trial = t;
        self
    }

    /// The built-in space of a class on the CPU backend. The CPU ignores warps, stages and
    /// vector width, so only tiles vary: matmul `BM, BN, BK ∈ {32, 64, 128, 256}` (64
    /// points), the other classes the tiles of [`Schedule::space`].
    pub fn builtin(class: KernelClass, dtype: tessera_ir::DType) -> Self {
        let tiles = match class {
            KernelClass::Matmul => {
                let v = [32u32, 64, 128, 256];
                let mut t = Vec::new();
                for m in v {
                    for n in v {
                        for k in v {
                            t.push(vec![m, n, k]);
                        }
                    }
                }
                t
            }
            _ => Schedule::space(class, dtype)
                .into_iter()
                .map(|s| s.tile)
                .collect(),
        };
        SearchSpace::new().tiles(tiles.into_iter().map(TileDims))
    }

    /// Every schedule of the space that verifies under the PTX rules (`schedule::verify`), the
    /// default first: [`Self::schedules_on`] with `Target::Ptx`.
    pub fn schedules(&self, default: &Schedule) -> Vec<Schedule> {
        self.schedules_on(default, schedule::Target::Ptx)
    }

    /// Every schedule of the space that verifies for `target`
    /// (`schedule::verify_for(_, target)`), the default first: the CPU tuner's candidates
    /// take tile dims up to the CPU's limit, the device tuner's up to the PTX one.
    ///
    /// ```
    /// use tessera::autotune::SearchSpace;
    /// use tessera::ir::{DType, schedule::{KernelClass, Schedule, Target}};
    /// let d = Schedule::default_for(KernelClass::Rowwise, DType::F32);
    /// let s = SearchSpace::new().tiles([(8, 512), (8, 4096)]);
    /// assert_eq!(s.schedules_on(&d, Target::Cpu).len(), 3);
    /// assert_eq!(s.schedules_on(&d, Target::Ptx).len(), 2); // [8, 4096] is past the PTX limit
    /// ```
    pub fn schedules_on(&self, default: &Schedule, target: schedule::Target) -> Vec<Schedule> {
        let or = |v: &Vec<u32>, d: u32| if v.is_empty() { vec![d] } else { v.clone() };
        let tiles = if self.tiles.is_empty() {
            vec![default.tile.clone()]
        } else {
            self.tiles.clone()
        };
        let mut out = vec![default.clone()];
        for t in &tiles {
            for &v in &or(&self.vectorize, default.vector) {
                for &st in &or(&self.stages, default.stages) {
                    for &w in &or(&self.warps, default.warps) {
                        let s = Schedule {
                            class: default.class,
                            tile: t.clone(),
                            warps: w,
                            stages: st,
                            vector: v,
                        };
                        if schedule::verify_for(&s, target).is_ok() && !out.contains(&s) {
                            out.push(s);
                        }
                    }
                }
            }
        }
        out
    }
}

/// A tile of 2 or 3 dims given as a vector (what `#[kernel(autotune(tiles = ..))]` emits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileDims(pub Vec<u32>);
impl IntoTile for TileDims {
    fn into_tile(self) -> Vec<u32> {
        self.0
    }
}

/// The surrogate's features of a point: log2 of tile dims, vector width, warps, and stages.
pub(crate) fn features(p: &Point) -> Vec<f64> {
    let l = |x: u32| (x.max(1) as f64).log2();
    vec![
        l(p.tile[0]),
        l(p.tile[1]),
        l(p.tile[2]),
        l(p.vector),
        l(p.warps),
        p.stages as f64,
    ]
}

/// The search space of a `tile!` kernel: knob assignments, plus how the cost model sees them.
///
/// ```
/// use tessera::autotune::TileSpace;
/// let s = TileSpace::grid(&[("BM", &[32, 64]), ("BN", &[32, 64]), ("BK", &[32])]);
/// assert_eq!(s.points.len(), 4);
/// assert_eq!(s.points[3], vec![("BM".to_string(), 64), ("BN".to_string(), 64), ("BK".to_string(), 32)]);
/// ```
#[derive(Clone, Debug)]
pub struct TileSpace {
    /// Knob assignments to try (knobs not named keep their defaults).
    pub points: Vec<Vec<(String, i64)>>,
    /// The knobs that are the cost model's tile dims, in order (default `BM, BN, BK`).
    pub tile_knobs: [String; 3],
    /// The knob holding the vector width, if any (default `VEC`).
    pub vector_knob: String,
    /// The knob holding the pipeline stages, if any (default `STAGES`).
    pub stages_knob: String,
    /// The cost model's problem from the arguments' shapes (in order); `None`: no model,
    /// candidates are ranked equal and the search is driven by measurements alone.
    pub problem: Option<ProblemOf>,
    /// How the points are explored.
    pub strategy: Strategy,
    /// Trial budget; `None`: as for [`SearchSpace::max_trials`].
    pub max_trials: Option<usize>,
    /// How each candidate is timed.
    pub trial: TrialConfig,
}

impl TileSpace {
    /// The product of each knob's values.
    pub fn grid(knobs: &[(&str, &[i64])]) -> TileSpace {
        let mut points: Vec<Vec<(String, i64)>> = vec![Vec::new()];
        for (name, values) in knobs {
            points = points
                .into_iter()
                .flat_map(|p| {
                    values.iter().map(move |v| {
                        let mut q = p.clone();
                        q.push((name.to_string(), *v));
                        q
                    })
                })
                .collect();
        }
        TileSpace {
            points,
            tile_knobs: ["BM".into(), "BN".into(), "BK".into()],
            vector_knob: "VEC".into(),
            stages_knob: "STAGES".into(),
            problem: None,
            strategy: Strategy::Hybrid,
            max_trials: None,
            trial: TrialConfig::default(),
        }
    }

    /// Names the tile knobs.
    pub fn tile_knobs(mut self, k: [&str; 3]) -> Self {
        self.tile_knobs = k.map(String::from);
        self
    }
    /// Sets the cost-model problem.
    pub fn problem(mut self, f: fn(&[Vec<usize>]) -> Problem) -> Self {
        self.problem = Some(f);
        self
    }
    /// The strategy.
    pub fn strategy(mut self, s: Strategy) -> Self {
        self.strategy = s;
        self
    }
    /// The trial budget.
    pub fn max_trials(mut self, n: usize) -> Self {
        self.max_trials = Some(n);
        self
    }
    /// How candidates are timed.
    pub fn trial(mut self, t: TrialConfig) -> Self {
        self.trial = t;
        self
    }

    /// The cost-model point of a full knob assignment.
    pub(crate) fn point(&self, knobs: &[(String, i64)]) -> Point {
        let get = |n: &str, d: i64| knobs.iter().find(|k| k.0 == n).map_or(d, |k| k.1) as u32;
        Point::new(
            [
                get(&self.tile_knobs[0], 1),
                get(&self.tile_knobs[1], 1),
                get(&self.tile_knobs[2], 1),
            ],
            1,
            get(&self.stages_knob, 1),
            get(&self.vector_knob, 1),
        )
    }
}
