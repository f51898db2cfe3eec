use super::*;
use crate::ErrorKind;

fn job() -> NewJob {
    NewJob::build("q", "k").unwrap()
}

fn names(w: &Workflow, idx: &[usize]) -> Vec<String> {
    idx.iter().map(|&i| w.tasks()[i].name.clone()).collect()
}

const NONE: [&str; 0] = [];

#[test]
fn a_diamond_is_ordered_after_its_dependencies() {
    let w = Workflow::new("etl")
        .add("load", job(), ["t1", "t2"])
        .add("t1", job(), ["fetch"])
        .add("t2", job(), ["fetch"])
        .add("fetch", job(), NONE);
    let p = w.plan(DEFAULT_MAX_WORKFLOW_TASKS).unwrap();
    assert_eq!(names(&w, p.order()), ["fetch", "t1", "t2", "load"]);
    assert_eq!(names(&w, &p.roots().collect::<Vec<_>>()), ["fetch"]);
    assert_eq!(names(&w, p.deps(0)), ["t1", "t2"]);
    assert_eq!(names(&w, p.dependents(3)), ["t1", "t2"]);
}

#[test]
fn a_dependency_named_twice_counts_once() {
    let w = Workflow::new("w").add("a", job(), NONE).add("b", job(), ["a", "a"]);
    let p = w.plan(10).unwrap();
    assert_eq!(p.deps(1), [0]);
    assert_eq!(p.dependents(0), [1]);
}

#[test]
fn refusals_are_typed_and_name_the_cause() {
    let cases: Vec<(Workflow, WorkflowError)> = vec![
        (Workflow::new("w"), WorkflowError::Empty { workflow: "w".into() }),
        (Workflow::new("").add("a", job(), NONE), WorkflowError::BadName { what: "workflow", name: "".into() }),
        (Workflow::new("w").add("a b", job(), NONE), WorkflowError::BadName { what: "task", name: "a b".into() }),
        (
            Workflow::new("w").add("a", job(), NONE).add("a", job(), NONE),
            WorkflowError::DuplicateTask { workflow: "w".into(), task: "a".into() },
        ),
        (
            Workflow::new("w").add("a", job(), ["nope"]),
            WorkflowError::UnknownDependency { workflow: "w".into(), task: "a".into(), dependency: "nope".into() },
        ),
        (
            Workflow::new("w").add("a", job(), ["a"]),
            WorkflowError::Cycle { workflow: "w".into(), cycle: vec!["a".into(), "a".into()] },
        ),
    ];
    for (w, want) in cases {
        let got = w.plan(10).unwrap_err();
        assert_eq!(got, want);
        let e: Error = got.into();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
}

#[test]
fn a_cycle_is_named_in_dependency_order() {
    // c waits for b, b for a, a for c; d hangs off the cycle.
    let w = Workflow::new("w")
        .add("root", job(), NONE)
        .add("a", job(), ["c", "root"])
        .add("b", job(), ["a"])
        .add("c", job(), ["b"])
        .add("d", job(), ["c"]);
    match w.plan(10).unwrap_err() {
        WorkflowError::Cycle { cycle, .. } => {
            assert_eq!(cycle.len(), 4, "{cycle:?}");
            assert_eq!(cycle.first(), cycle.last());
            let mut three = cycle[..3].to_vec();
            three.sort();
            assert_eq!(three, ["a", "b", "c"]);
            // Each one waits for the one before it.
            for pair in cycle.windows(2) {
                let later = w.tasks().iter().find(|t| t.name == pair[1]).unwrap();
                assert!(later.deps.contains(&pair[0]), "{} does not wait for {}: {cycle:?}", pair[1], pair[0]);
            }
        }
        other => panic!("not a cycle: {other:?}"),
    }
    let msg = Error::from(w.plan(10).unwrap_err()).to_string();
    assert!(msg.contains("dependency cycle"), "{msg}");
}

#[test]
fn the_task_limit_is_checked_before_anything_else() {
    let mut w = Workflow::new("w");
    for i in 0..11 {
        w = w.add(format!("t{i}"), job(), NONE);
    }
    assert_eq!(w.plan(11).unwrap().order().len(), 11);
    assert_eq!(w.plan(10).unwrap_err(), WorkflowError::TooManyTasks { workflow: "w".into(), count: 11, limit: 10 });
}

#[test]
fn a_fan_out_and_fan_in_of_10_001_plans_in_linear_steps() {
    let mut w = Workflow::new("fan").add("fetch", job(), NONE);
    for i in 0..10_000 {
        w = w.add(format!("t{i}"), job(), ["fetch"]);
    }
    w = w.add("load", job(), (0..10_000).map(|i| format!("t{i}")));
    let p = w.plan(DEFAULT_MAX_WORKFLOW_TASKS).unwrap();
    assert_eq!(p.order().len(), 10_002);
    assert_eq!(*p.order().last().unwrap(), 10_001);
    assert_eq!(p.dependents(0).len(), 10_000);
    assert_eq!(p.deps(10_001).len(), 10_000);
    // One failed middle task cancels the fan-in, and nothing else.
    assert_eq!(p.cascade(5), [10_001]);
}

#[test]
fn a_cascade_is_transitive_and_stops_at_a_task_that_runs_anyway() {
    // a -> b -> c -> d, and a -> e; c runs anyway.
    let w = Workflow::new("w")
        .add("a", job(), NONE)
        .add("b", job(), ["a"])
        .task(Task::new("c", job()).after(["b"]).run_anyway())
        .add("d", job(), ["c"])
        .add("e", job(), ["a"]);
    let p = w.plan(10).unwrap();
    assert_eq!(names(&w, &p.cascade(0)), ["b", "e"]);
    assert_eq!(names(&w, &p.cascade(1)), Vec::<String>::new());
    assert_eq!(names(&w, &p.cascade(2)), ["d"]);
    assert_eq!(names(&w, &p.cascade(3)), Vec::<String>::new());
}

#[test]
fn a_cascade_reaches_a_task_by_two_paths_once() {
    let w = Workflow::new("w")
        .add("a", job(), NONE)
        .add("b", job(), ["a"])
        .add("c", job(), ["a"])
        .add("d", job(), ["b", "c"])
        .add("e", job(), ["d"]);
    let p = w.plan(10).unwrap();
    assert_eq!(names(&w, &p.cascade(0)), ["b", "c", "d", "e"]);
}
