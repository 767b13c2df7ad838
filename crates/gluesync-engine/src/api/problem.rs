/// Why the install cannot be worked on until a person changes something.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Condition reason and Warning event reason.
    pub reason: &'static str,
    pub message: String,
}
