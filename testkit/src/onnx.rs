//! A small ONNX interpreter, enough for YAHPO Gym's LCBench surrogate (`model.onnx` in
//! `benches/peers/lcbench/`): the protobuf read by hand, and the 17 operators that graph uses,
//! evaluated on the CPU in node order.
//!
//! Why not a crate: `tract-onnx` brings about a hundred crates to the build for one 2 MB MLP, and
//! `candle-onnx` needs `protoc` at build time. Measured against onnxruntime on a committed
//! fixture (`cli/tests/end_to_end/lcbench.rs`), and in `benches/early_stopping.rs` for speed.
//!
//! Float tensors are `f32`, as in the model; matrix products and normalisation accumulate in
//! `f64` and round once, which keeps the outputs within onnxruntime's own rounding of them.

use std::collections::HashMap;

/// A tensor: a shape and its elements, row-major.
#[derive(Clone, Debug)]
pub enum Tensor {
    F32(Vec<usize>, Vec<f32>),
    I64(Vec<usize>, Vec<i64>),
}

impl Tensor {
    pub fn shape(&self) -> &[usize] {
        match self {
            Tensor::F32(s, _) | Tensor::I64(s, _) => s,
        }
    }

    fn floats(&self) -> Result<&[f32], String> {
        match self {
            Tensor::F32(_, v) => Ok(v),
            Tensor::I64(..) => Err("expected a float tensor, found an integer one".into()),
        }
    }

    fn ints(&self) -> Result<Vec<i64>, String> {
        match self {
            Tensor::I64(_, v) => Ok(v.clone()),
            Tensor::F32(..) => Err("expected an integer tensor, found a float one".into()),
        }
    }
}

/// One node: its operator, input and output names, and attributes.
#[derive(Debug)]
struct Node {
    op: String,
    inputs: Vec<String>,
    outputs: Vec<String>,
    attributes: HashMap<String, Attribute>,
}

// Every kind is decoded, so that the ones the graph does not use are skipped right.
#[allow(dead_code)]
#[derive(Debug)]
enum Attribute {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
    Tensor(Tensor),
}

/// A loaded graph: weights by name, nodes in order, and the output's name.
pub struct Model {
    initializers: HashMap<String, Tensor>,
    nodes: Vec<Node>,
    outputs: Vec<String>,
}

// --- protobuf: only what ONNX's ModelProto needs --------------------------------------------

// Every wire type is decoded, so that the fields ONNX adds are skipped right.
#[allow(dead_code)]
enum Field<'a> {
    Varint(u64),
    Fixed32(u32),
    Fixed64(u64),
    Bytes(&'a [u8]),
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos).ok_or("truncated varint")?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint longer than 10 bytes".into())
}

/// The fields of one message, in order: (number, value).
fn fields(buf: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let field = match key & 7 {
            0 => Field::Varint(varint(buf, &mut pos)?),
            1 => {
                let b = buf.get(pos..pos + 8).ok_or("truncated fixed64")?;
                pos += 8;
                Field::Fixed64(u64::from_le_bytes(b.try_into().expect("8 bytes")))
            }
            2 => {
                let len = varint(buf, &mut pos)? as usize;
                let b = buf.get(pos..pos + len).ok_or("truncated bytes field")?;
                pos += len;
                Field::Bytes(b)
            }
            5 => {
                let b = buf.get(pos..pos + 4).ok_or("truncated fixed32")?;
                pos += 4;
                Field::Fixed32(u32::from_le_bytes(b.try_into().expect("4 bytes")))
            }
            w => return Err(format!("unsupported protobuf wire type {w}")),
        };
        out.push((key >> 3, field));
    }
    Ok(out)
}

fn string(field: &Field) -> Result<String, String> {
    match field {
        Field::Bytes(b) => String::from_utf8(b.to_vec()).map_err(|e| e.to_string()),
        _ => Err("expected a string field".into()),
    }
}

/// Repeated int64s, packed or not.
fn push_ints(field: &Field, out: &mut Vec<i64>) -> Result<(), String> {
    match field {
        Field::Varint(v) => out.push(*v as i64),
        Field::Bytes(b) => {
            let mut pos = 0;
            while pos < b.len() {
                out.push(varint(b, &mut pos)? as i64);
            }
        }
        _ => return Err("expected int64 values".into()),
    }
    Ok(())
}

/// TensorProto: dims (1), data_type (2), float_data (4), int32_data (5), int64_data (7),
/// raw_data (9).
fn tensor(buf: &[u8]) -> Result<(String, Tensor), String> {
    let (mut dims, mut data_type, mut name) = (Vec::new(), 0, String::new());
    let (mut raw, mut floats, mut ints) = (None, Vec::new(), Vec::new());
    for (number, field) in fields(buf)? {
        match (number, &field) {
            (1, _) => push_ints(&field, &mut dims)?,
            (2, Field::Varint(v)) => data_type = *v,
            (4, Field::Bytes(b)) => floats.extend(
                b.chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))),
            ),
            (4, Field::Fixed32(v)) => floats.push(f32::from_bits(*v)),
            (5 | 7, _) => push_ints(&field, &mut ints)?,
            (8, _) => name = string(&field)?,
            (9, Field::Bytes(b)) => raw = Some(*b),
            _ => {}
        }
    }
    let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    let t = match (data_type, raw) {
        (1, Some(b)) => Tensor::F32(
            shape,
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect(),
        ),
        (1, None) => Tensor::F32(shape, floats),
        (7, Some(b)) => Tensor::I64(
            shape,
            b.chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        ),
        (6, Some(b)) => Tensor::I64(
            shape,
            b.chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes(c.try_into().expect("4 bytes"))))
                .collect(),
        ),
        (6 | 7, None) => Tensor::I64(shape, ints),
        (t, _) => return Err(format!("tensor {name:?}: unsupported data type {t}")),
    };
    Ok((name, t))
}

/// AttributeProto: name (1), f (2), i (3), t (5), ints (8).
fn attribute(buf: &[u8]) -> Result<(String, Option<Attribute>), String> {
    let (mut name, mut value, mut ints) = (String::new(), None, Vec::new());
    for (number, field) in fields(buf)? {
        match (number, &field) {
            (1, _) => name = string(&field)?,
            (2, Field::Fixed32(v)) => value = Some(Attribute::Float(f32::from_bits(*v))),
            (3, Field::Varint(v)) => value = Some(Attribute::Int(*v as i64)),
            (5, Field::Bytes(b)) => value = Some(Attribute::Tensor(tensor(b)?.1)),
            (8, _) => push_ints(&field, &mut ints)?,
            _ => {}
        }
    }
    if value.is_none() && !ints.is_empty() {
        value = Some(Attribute::Ints(ints));
    }
    Ok((name, value))
}

/// NodeProto: input (1), output (2), op_type (4), attribute (5).
fn node(buf: &[u8]) -> Result<Node, String> {
    let mut node = Node {
        op: String::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        attributes: HashMap::new(),
    };
    for (number, field) in fields(buf)? {
        match number {
            1 => node.inputs.push(string(&field)?),
            2 => node.outputs.push(string(&field)?),
            4 => node.op = string(&field)?,
            5 => {
                if let Field::Bytes(b) = field {
                    if let (name, Some(a)) = attribute(b)? {
                        node.attributes.insert(name, a);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(node)
}

impl Model {
    /// Reads a serialised ModelProto (graph: field 7; its nodes 1, initializers 5, outputs 12).
    pub fn read(bytes: &[u8]) -> Result<Model, String> {
        let graph = fields(bytes)?
            .into_iter()
            .find_map(|(n, f)| match (n, f) {
                (7, Field::Bytes(b)) => Some(b),
                _ => None,
            })
            .ok_or("no graph in the model")?;
        let mut model = Model {
            initializers: HashMap::new(),
            nodes: Vec::new(),
            outputs: Vec::new(),
        };
        for (number, field) in fields(graph)? {
            let Field::Bytes(b) = field else { continue };
            match number {
                1 => model.nodes.push(node(b)?),
                5 => {
                    let (name, t) = tensor(b)?;
                    model.initializers.insert(name, t);
                }
                12 => {
                    let name = fields(b)?
                        .into_iter()
                        .find_map(|(n, f)| (n == 1).then(|| string(&f)))
                        .ok_or("an output without a name")??;
                    model.outputs.push(name);
                }
                _ => {}
            }
        }
        Ok(model)
    }

    /// Runs the graph on `inputs` (by name) and returns its first output.
    pub fn run(&self, inputs: Vec<(&str, Tensor)>) -> Result<Tensor, String> {
        let mut values: HashMap<&str, Tensor> = HashMap::new();
        for (name, t) in inputs {
            values.insert(name, t);
        }
        for node in &self.nodes {
            let args: Vec<&Tensor> = node
                .inputs
                .iter()
                .map(|name| {
                    values
                        .get(name.as_str())
                        .or_else(|| self.initializers.get(name))
                        .ok_or_else(|| format!("{}: no value named {name:?}", node.op))
                })
                .collect::<Result<_, _>>()?;
            let out = eval(node, &args).map_err(|e| format!("{}: {e}", node.op))?;
            values.insert(&node.outputs[0], out);
        }
        let name = self.outputs.first().ok_or("the graph has no output")?;
        values
            .remove(name.as_str())
            .ok_or_else(|| format!("no value for the output {name:?}"))
    }
}

// --- operators ------------------------------------------------------------------------------

fn int_attr(node: &Node, name: &str, default: i64) -> i64 {
    match node.attributes.get(name) {
        Some(Attribute::Int(v)) => *v,
        _ => default,
    }
}

fn float_attr(node: &Node, name: &str, default: f32) -> f32 {
    match node.attributes.get(name) {
        Some(Attribute::Float(v)) => *v,
        _ => default,
    }
}

fn axis(a: i64, rank: usize) -> usize {
    if a < 0 {
        (a + rank as i64) as usize
    } else {
        a as usize
    }
}

fn eval(node: &Node, args: &[&Tensor]) -> Result<Tensor, String> {
    let arg = |i: usize| -> Result<&Tensor, String> {
        args.get(i)
            .copied()
            .ok_or_else(|| format!("missing input {i}"))
    };
    Ok(match node.op.as_str() {
        "Constant" => match node.attributes.get("value") {
            Some(Attribute::Tensor(t)) => t.clone(),
            _ => return Err("no tensor value".into()),
        },
        "Add" | "Sub" | "Mul" | "Div" => binary(&node.op, arg(0)?, arg(1)?)?,
        "Log" => unary(arg(0)?, f32::ln)?,
        "Exp" => unary(arg(0)?, f32::exp)?,
        "Relu" => unary(arg(0)?, |x| x.max(0.0))?,
        "Sigmoid" => unary(arg(0)?, onnxruntime_logistic)?,
        "Cast" => match (int_attr(node, "to", 1), arg(0)?) {
            (1, Tensor::F32(s, v)) => Tensor::F32(s.clone(), v.clone()),
            (1, Tensor::I64(s, v)) => Tensor::F32(s.clone(), v.iter().map(|&x| x as f32).collect()),
            (6 | 7, Tensor::I64(s, v)) => Tensor::I64(s.clone(), v.clone()),
            (6 | 7, Tensor::F32(s, v)) => {
                Tensor::I64(s.clone(), v.iter().map(|&x| x as i64).collect())
            }
            (to, _) => return Err(format!("cast to type {to}")),
        },
        "Shape" => {
            let s = arg(0)?.shape();
            Tensor::I64(vec![s.len()], s.iter().map(|&d| d as i64).collect())
        }
        "Unsqueeze" => {
            let t = arg(0)?;
            let mut shape = t.shape().to_vec();
            let mut axes = arg(1)?.ints()?;
            let rank = shape.len() + axes.len();
            for a in axes.iter_mut() {
                *a = axis(*a, rank) as i64;
            }
            axes.sort_unstable();
            for a in axes {
                shape.insert(a as usize, 1);
            }
            reshape(t, shape)
        }
        "Gather" => gather(arg(0)?, arg(1)?, int_attr(node, "axis", 0))?,
        "Concat" => concat(args, int_attr(node, "axis", 0))?,
        "Slice" => slice(args)?,
        "Gemm" => gemm(node, args)?,
        "BatchNormalization" => batch_norm(args, float_attr(node, "epsilon", 1e-5))?,
        op => return Err(format!("unsupported operator {op}")),
    })
}

fn reshape(t: &Tensor, shape: Vec<usize>) -> Tensor {
    match t {
        Tensor::F32(_, v) => Tensor::F32(shape, v.clone()),
        Tensor::I64(_, v) => Tensor::I64(shape, v.clone()),
    }
}

fn unary(t: &Tensor, f: impl Fn(f32) -> f32) -> Result<Tensor, String> {
    Ok(Tensor::F32(
        t.shape().to_vec(),
        t.floats()?.iter().map(|&x| f(x)).collect(),
    ))
}

/// onnxruntime's CPU Sigmoid: Eigen's rational approximation of the logistic function (odd
/// degree-9 numerator, even degree-10 denominator, input clamped to [-18, 18]), in f32 with
/// fused multiply-adds as its FMA3 kernel computes it. Its absolute error is ~1e-7, and the
/// surrogate multiplies the first output by 46,790 seconds, so the exact logistic would differ
/// from onnxruntime's `time` by up to 6e-4 relative.
fn onnxruntime_logistic(x: f32) -> f32 {
    // MLAS's constants (logistic.cpp), as the nearest f32s.
    const NUMERATOR: [f32; 5] = [
        4.37031e-11,
        1.156_273_2e-7,
        6.085_749e-5,
        8.513_771e-3,
        0.248_287_95,
    ];
    const DENOMINATOR: [f32; 6] = [
        6.102_473_7e-13,
        5.761_021_4e-9,
        6.291_068e-6,
        1.701_988_2e-3,
        0.116_817_65,
        0.993_151_9,
    ];
    let x = x.clamp(-18.0, 18.0);
    let x2 = x * x;
    let p = NUMERATOR[1..]
        .iter()
        .fold(NUMERATOR[0], |acc, &c| acc.mul_add(x2, c))
        * x;
    let q = DENOMINATOR[1..]
        .iter()
        .fold(DENOMINATOR[0], |acc, &c| acc.mul_add(x2, c));
    (p / q + 0.5).clamp(0.0, 1.0)
}

/// The output shape of a broadcast, and each side's flat index for every output element.
type Broadcast = (Vec<usize>, Vec<(usize, usize)>);

/// Numpy broadcasting of two shapes.
fn broadcast(a: &[usize], b: &[usize]) -> Result<Broadcast, String> {
    let rank = a.len().max(b.len());
    let pad = |s: &[usize]| -> Vec<usize> {
        let mut p = vec![1; rank - s.len()];
        p.extend_from_slice(s);
        p
    };
    let (pa, pb) = (pad(a), pad(b));
    let mut shape = Vec::with_capacity(rank);
    for (x, y) in pa.iter().zip(&pb) {
        if x != y && *x != 1 && *y != 1 {
            return Err(format!("shapes {a:?} and {b:?} do not broadcast"));
        }
        shape.push(*x.max(y));
    }
    let strides = |p: &[usize]| -> Vec<usize> {
        let mut s = vec![0; rank];
        let mut acc = 1;
        for i in (0..rank).rev() {
            s[i] = if p[i] == 1 { 0 } else { acc };
            acc *= p[i];
        }
        s
    };
    let (sa, sb) = (strides(&pa), strides(&pb));
    let n: usize = shape.iter().product();
    let mut index = Vec::with_capacity(n);
    let mut coord = vec![0; rank];
    for _ in 0..n {
        let ia = coord.iter().zip(&sa).map(|(c, s)| c * s).sum();
        let ib = coord.iter().zip(&sb).map(|(c, s)| c * s).sum();
        index.push((ia, ib));
        for d in (0..rank).rev() {
            coord[d] += 1;
            if coord[d] < shape[d] {
                break;
            }
            coord[d] = 0;
        }
    }
    Ok((shape, index))
}

fn binary(op: &str, a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    let (shape, index) = broadcast(a.shape(), b.shape())?;
    Ok(match (a, b) {
        (Tensor::F32(_, x), Tensor::F32(_, y)) => {
            let f: fn(f32, f32) -> f32 = match op {
                "Add" => |p, q| p + q,
                "Sub" => |p, q| p - q,
                "Mul" => |p, q| p * q,
                _ => |p, q| p / q,
            };
            Tensor::F32(shape, index.iter().map(|&(i, j)| f(x[i], y[j])).collect())
        }
        (Tensor::I64(_, x), Tensor::I64(_, y)) => {
            let f: fn(i64, i64) -> i64 = match op {
                "Add" => |p, q| p + q,
                "Sub" => |p, q| p - q,
                "Mul" => |p, q| p * q,
                _ => |p, q| p / q,
            };
            Tensor::I64(shape, index.iter().map(|&(i, j)| f(x[i], y[j])).collect())
        }
        _ => return Err("a float and an integer operand".into()),
    })
}

fn gather(data: &Tensor, indices: &Tensor, axis_attr: i64) -> Result<Tensor, String> {
    let shape = data.shape();
    let ax = axis(axis_attr, shape.len());
    let (outer, n, inner) = (
        shape[..ax].iter().product::<usize>(),
        shape[ax],
        shape[ax + 1..].iter().product::<usize>(),
    );
    let idx: Vec<usize> = indices
        .ints()?
        .iter()
        .map(|&i| {
            let i = if i < 0 { i + n as i64 } else { i };
            usize::try_from(i)
                .ok()
                .filter(|&i| i < n)
                .ok_or_else(|| format!("index {i} out of 0..{n}"))
        })
        .collect::<Result<_, _>>()?;
    let mut out_shape = shape[..ax].to_vec();
    out_shape.extend_from_slice(indices.shape());
    out_shape.extend_from_slice(&shape[ax + 1..]);
    let pick = |o: usize, i: usize| (o * n + i) * inner..(o * n + i + 1) * inner;
    Ok(match data {
        Tensor::F32(_, v) => {
            let mut out = Vec::with_capacity(outer * idx.len() * inner);
            for o in 0..outer {
                for &i in &idx {
                    out.extend_from_slice(&v[pick(o, i)]);
                }
            }
            Tensor::F32(out_shape, out)
        }
        Tensor::I64(_, v) => {
            let mut out = Vec::with_capacity(outer * idx.len() * inner);
            for o in 0..outer {
                for &i in &idx {
                    out.extend_from_slice(&v[pick(o, i)]);
                }
            }
            Tensor::I64(out_shape, out)
        }
    })
}

fn concat(args: &[&Tensor], axis_attr: i64) -> Result<Tensor, String> {
    let first = args.first().ok_or("nothing to concatenate")?;
    let ax = axis(axis_attr, first.shape().len());
    let outer: usize = first.shape()[..ax].iter().product();
    let mut shape = first.shape().to_vec();
    shape[ax] = args.iter().map(|t| t.shape()[ax]).sum();
    let mut out = Vec::new();
    for o in 0..outer {
        for t in args {
            let block: usize = t.shape()[ax..].iter().product();
            out.extend_from_slice(&t.floats()?[o * block..(o + 1) * block]);
        }
    }
    Ok(Tensor::F32(shape, out))
}

/// Slice on one axis with step 1 (what the graph uses: halves of the last axis).
fn slice(args: &[&Tensor]) -> Result<Tensor, String> {
    let t = args[0];
    let (starts, ends) = (args[1].ints()?, args[2].ints()?);
    let axes = match args.get(3) {
        Some(a) => a.ints()?,
        None => vec![0],
    };
    if starts.len() != 1 || args.get(4).is_some() {
        return Err("only one axis, step 1".into());
    }
    let shape = t.shape();
    let ax = axis(axes[0], shape.len());
    let n = shape[ax] as i64;
    let clamp = |v: i64| (if v < 0 { v + n } else { v }).clamp(0, n) as usize;
    let (s, e) = (clamp(starts[0]), clamp(ends[0]));
    let (outer, inner) = (
        shape[..ax].iter().product::<usize>(),
        shape[ax + 1..].iter().product::<usize>(),
    );
    let v = t.floats()?;
    let mut out = Vec::with_capacity(outer * (e - s) * inner);
    for o in 0..outer {
        out.extend_from_slice(&v[(o * shape[ax] + s) * inner..(o * shape[ax] + e) * inner]);
    }
    let mut out_shape = shape.to_vec();
    out_shape[ax] = e - s;
    Ok(Tensor::F32(out_shape, out))
}

/// Y = alpha * A * B' + beta * C (the graph's Gemms all have transB = 1, transA = 0).
fn gemm(node: &Node, args: &[&Tensor]) -> Result<Tensor, String> {
    if int_attr(node, "transA", 0) != 0 || int_attr(node, "transB", 0) != 1 {
        return Err("only transA = 0, transB = 1".into());
    }
    let (alpha, beta) = (
        f64::from(float_attr(node, "alpha", 1.0)),
        f64::from(float_attr(node, "beta", 1.0)),
    );
    let (a, b) = (args[0], args[1]);
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let n = b.shape()[0];
    if b.shape()[1] != k {
        return Err(format!("shapes {:?} and {:?}", a.shape(), b.shape()));
    }
    let (x, w) = (a.floats()?, b.floats()?);
    let bias = match args.get(2) {
        Some(c) if c.shape() == [n] => c.floats()?.to_vec(),
        Some(c) => return Err(format!("bias of shape {:?}", c.shape())),
        None => vec![0.0; n],
    };
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        let row: Vec<f64> = x[i * k..(i + 1) * k]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        for j in 0..n {
            let dot = dot(&row, &w[j * k..(j + 1) * k]);
            out[i * n + j] = (alpha * dot + beta * f64::from(bias[j])) as f32;
        }
    }
    Ok(Tensor::F32(vec![m, n], out))
}

/// Four running sums, so that the loop vectorises.
fn dot(x: &[f64], w: &[f32]) -> f64 {
    let mut acc = [0f64; 4];
    let (xc, wc) = (x.chunks_exact(4), w.chunks_exact(4));
    let (xr, wr) = (xc.remainder(), wc.remainder());
    for (p, q) in xc.zip(wc) {
        for l in 0..4 {
            acc[l] += p[l] * f64::from(q[l]);
        }
    }
    let tail: f64 = xr.iter().zip(wr).map(|(p, &q)| p * f64::from(q)).sum();
    acc.iter().sum::<f64>() + tail
}

/// Inference batch normalisation over axis 1 of an [N, C] tensor.
fn batch_norm(args: &[&Tensor], epsilon: f32) -> Result<Tensor, String> {
    let x = args[0];
    let [scale, bias, mean, var] = [args[1], args[2], args[3], args[4]].map(|t| t.floats());
    let (scale, bias, mean, var) = (scale?, bias?, mean?, var?);
    let c = x.shape()[1];
    if x.shape().len() != 2 {
        return Err(format!("input of shape {:?}", x.shape()));
    }
    let v = x.floats()?;
    let out = v
        .iter()
        .enumerate()
        .map(|(i, &value)| {
            let ch = i % c;
            let norm = (f64::from(value) - f64::from(mean[ch]))
                / (f64::from(var[ch]) + f64::from(epsilon)).sqrt();
            (norm * f64::from(scale[ch]) + f64::from(bias[ch])) as f32
        })
        .collect();
    Ok(Tensor::F32(x.shape().to_vec(), out))
}
