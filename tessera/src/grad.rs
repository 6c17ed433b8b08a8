//! `tessera::grad`: the backward kernels of a `#[kernel]`, built from its Graph IR by
//! [`tessera_ir::autodiff`] and compiled like any kernel.
//!
//! A function over the kernel's static definition (not a `#[kernel(grad)]` attribute): it
//! works on every compiled definition — a non-generic kernel's `name::KERNEL`, a library's —
//! without a second macro expansion, and keeps the proc-macro crate a parser and emitter. The
//! backward graphs are built and compiled on the first call (then cached for the process); on
//! a PTX device their PTX comes from the JIT cache rather than from the build.

use crate::tensor::{Element, Tensor, TensorRef};
use crate::{Error, KernelDef, Result};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The backward kernels of one forward kernel: one per floating-point parameter.
pub struct Grad {
    forward: &'static KernelDef,
    /// Per differentiated parameter: its name and the backward kernel
    /// `@<kernel>_grad_<param>(<forward params>, %dy)`.
    kernels: Vec<(String, &'static KernelDef)>,
}

/// The backward kernels of `kernel` (built once per process, then shared).
///
/// ```
/// use tessera::prelude::*;
///
/// #[tessera::kernel]
/// fn sq_loss(x: Tensor<f32, (M, N)>, w: Tensor<f32, (N, K)>) -> Tensor<f32, (M, K)> {
///     tanh(x.matmul(w))
/// }
///
/// let x = Tensor::<f32>::randn(&[4, 3], 1);
/// let w = Tensor::<f32>::randn(&[3, 2], 2);
/// let dy = Tensor::<f32>::randn(&[4, 2], 3);
/// let g = tessera::grad(&sq_loss::KERNEL)?;
/// assert_eq!(g.params(), ["x", "w"]);
/// let [dx, dw] = <[Tensor<f32>; 2]>::try_from(g.backward::<f32>(&[x.arg(), w.arg()], &dy)?).unwrap();
/// assert_eq!((dx.shape(), dw.shape()), (&[4, 3][..], &[3, 2][..]));
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn grad(kernel: &'static KernelDef) -> Result<&'static Grad> {
    build(kernel, None)
}

/// [`grad`] for the named parameters only (in the order given): the backward kernels of the
/// others are neither built nor run — e.g. a training step needs the weights' gradients, not
/// the data's. A name that is no float parameter of the kernel is an error naming it.
///
/// ```
/// use tessera::prelude::*;
///
/// #[tessera::kernel]
/// fn loss(x: Tensor<f32, (M, N)>, w: Tensor<f32, (N,)>) -> Tensor<f32, (M,)> {
///     (x * w).sum(1)
/// }
///
/// let g = tessera::grad_wrt(&loss::KERNEL, &["w"])?;
/// assert_eq!(g.params(), ["w"]);
/// let x = Tensor::<f32>::randn(&[5, 3], 1);
/// let dw = &g.backward::<f32>(&[x.arg(), Tensor::<f32>::randn(&[3], 2).arg()], &Tensor::randn(&[5], 3))?[0];
/// assert_eq!(dw.shape(), &[3]);
/// assert!(tessera::grad_wrt(&loss::KERNEL, &["v"]).is_err());
/// # Ok::<(), tessera::Error>(())
/// ```
pub fn grad_wrt(kernel: &'static KernelDef, params: &[&str]) -> Result<&'static Grad> {
    build(kernel, Some(params))
}

fn build(kernel: &'static KernelDef, only: Option<&[&str]>) -> Result<&'static Grad> {
    type Key = (usize, Option<Vec<String>>);
    static BUILT: OnceLock<Mutex<HashMap<Key, &'static Grad>>> = OnceLock::new();
    let key = (
        kernel as *const KernelDef as usize,
        only.map(|o| o.iter().map(|s| s.to_string()).collect()),
    );
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(g) = built.get(&key) {
        return Ok(g);
    }
    let fail = |message: String| Error::Compile {
        kernel: format!("{}_grad", kernel.name()),
        message,
    };
    let g = tessera_ir::graph::parse(kernel.graph_text())
        .map_err(|e| fail(format!("graph text: {e}")))?;
    let grads = match only {
        None => tessera_ir::autodiff::grad(&g),
        Some(names) => names
            .iter()
            .map(|p| {
                tessera_ir::autodiff::grad_wrt(&g, p).map(|graph| tessera_ir::autodiff::Gradient {
                    param: p.to_string(),
                    graph,
                })
            })
            .collect(),
    }
    .map_err(|e| fail(e.to_string()))?;
    let mut kernels = Vec::new();
    for gr in grads {
        // One definition per process and kernel: the texts live as long as the definition.
        let name: &'static str = Box::leak(gr.graph.name.clone().into_boxed_str());
        let text: &'static str = Box::leak(gr.graph.to_string().into_boxed_str());
        let def: &'static KernelDef = Box::leak(Box::new(KernelDef::new(name, text, &[])));
        kernels.push((gr.param, def));
    }
    let g: &'static Grad = Box::leak(Box::new(Grad {
        forward: kernel,
        kernels,
    }));
    built.insert(key, g);
    Ok(g)
}

impl Grad {
    /// The differentiated parameters' names, in signature order.
    pub fn params(&self) -> Vec<&str> {
        self.kernels.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The backward kernel of parameter `param` (its Graph IR, fusion plan and kernels).
    pub fn kernel(&self, param: &str) -> Option<&'static KernelDef> {
        self.kernels
            .iter()
            .find(|(n, _)| n == param)
            .map(|(_, k)| *k)
    }

    /// The gradients `dy · ∂kernel/∂p` of every differentiated parameter `p` (in
    /// [`Self::params`] order) at `args` (the forward arguments, in signature order), on the
    /// arguments' device. `T` is the parameters' element type.
    pub fn backward<T: Element>(
        &self,
        args: &[TensorRef<'_>],
        dy: &Tensor<f32>,
    ) -> Result<Vec<Tensor<T>>> {
        let mut all: Vec<TensorRef<'_>> = args.to_vec();
        all.push(dy.arg());
        self.kernels
            .iter()
            .map(|(_, k)| k.launch::<T>(&all))
            .collect::<Result<Vec<_>>>()
            .map_err(|e| match e {
                Error::ArgCount { expected, got, .. } => Error::ArgCount {
                    kernel: format!("{}_grad", self.forward.name()),
                    expected: expected - 1,
                    got: got - 1,
                },
                e => e,
            })
    }
}
