"""The generated protobuf code is what the .proto files produce today."""

from dataplane.proto import gen


def test_generated_code_matches_the_protos():
    assert gen.main(["--check"]) == 0, "run ./dev proto and commit dataplane/_gen"
