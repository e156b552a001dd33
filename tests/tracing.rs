//! Tracing: silent without a subscriber; with one, the pipeline's phases show up as spans and
//! events (here: validation and the reference engine; the cuDNN phases likewise with a GPU or
//! deviceless context).

mod common;

use std::sync::{Arc, Mutex};

use cudnn_graph::{DataType, GraphBuilder};

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn phases_are_traced() {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let mut g = GraphBuilder::new("traced");
        let x = g.input("x", DataType::F32, &[2, 3]).unwrap();
        let y = g.op("relu", &[x.into()], &[]).unwrap()[0];
        g.output(y, "y", DataType::F32).unwrap();
        let graph = g.build().unwrap();
        let x = common::random::<f32>(1, 6);
        cudnn_graph::reference::run(&graph, &[("x", x.as_slice().into())]).unwrap();
    });
    let log = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("validate") && log.contains("graph=traced"), "{log}");
    assert!(log.contains("reference run") && log.contains("elapsed_us"), "{log}");
    assert!(log.contains("op=\"relu\""), "{log}");
}
