"""The AsyncAPI check fails on what it is there to catch."""

import importlib.util
import json
import shutil
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("check_asyncapi", ROOT / "clients/python/tools/check_asyncapi.py")
check_asyncapi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_asyncapi)

DOCUMENT = ROOT / "docs" / "asyncapi.yaml"
FIXTURES = ROOT / "libs" / "qm-wire" / "tests" / "fixtures"


class Check(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp())
        self.fixtures = self.dir / "fixtures"
        shutil.copytree(FIXTURES, self.fixtures)
        self.document = self.dir / "asyncapi.yaml"
        shutil.copy(DOCUMENT, self.document)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def problems(self):
        return check_asyncapi.check(self.document, self.fixtures)

    def test_the_document_and_fixtures_as_committed_pass(self):
        self.assertEqual(self.problems(), [])

    def test_a_field_the_document_does_not_name_fails_its_fixture(self):
        path = self.fixtures / "service_job.json"
        job = json.loads(path.read_text())
        job["attempts"][0]["newField"] = 1
        path.write_text(json.dumps(job))
        problems = self.problems()
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("service_job.json at attempts/0", problems[0])
        self.assertIn("newField", problems[0])

    def test_a_wrong_type_fails_and_an_unlisted_fixture_is_named(self):
        path = self.fixtures / "submit_service_job.json"
        job = json.loads(path.read_text())
        job["instanceCount"] = "two"
        path.write_text(json.dumps(job))
        (self.fixtures / "new.json").write_text("{}")
        problems = "\n".join(self.problems())
        self.assertIn("submit_service_job.json at instanceCount", problems)
        self.assertIn("fixture new.json: not in schemas.json", problems)

    def test_a_dangling_reference_and_a_bad_document_fail(self):
        text = DOCUMENT.read_text()
        self.document.write_text(text.replace("'#/components/schemas/JobStateChange'", "'#/components/schemas/Nope'", 1))
        self.assertTrue(any("resolves to nothing" in p for p in self.problems()))
        self.document.write_text(text.replace("asyncapi: 3.0.0", "asyncapi: three", 1))
        self.assertTrue(any("not an AsyncAPI 3.0 document" in p for p in self.problems()))
        self.document.write_text(text + "\n  bad: [unclosed\n")
        self.assertTrue(any("not YAML" in p for p in self.problems()))


if __name__ == "__main__":
    unittest.main()
