//! Prints the GluesyncPlatform CustomResourceDefinition as YAML (`make crd` writes it into the chart).

fn main() -> Result<(), serde_yaml::Error> {
    print!("{}", gluesync_operator::crd_yaml()?);
    Ok(())
}
