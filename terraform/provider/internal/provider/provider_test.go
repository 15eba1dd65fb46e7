package provider

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	dschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
)

func TestEndpointIsCheckedAndNormalized(t *testing.T) {
	for raw, want := range map[string]string{
		"http://127.0.0.1:8000":           "http://127.0.0.1:8000",
		"http://localhost:8000/":          "http://localhost:8000",
		"http://[::1]:8000":               "http://[::1]:8000",
		"https://meridian.example/":       "https://meridian.example",
		"https://meridian.example/api/v1": "https://meridian.example",
	} {
		got, err := checkEndpoint(raw, false)
		if err != nil || got != want {
			t.Errorf("checkEndpoint(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, bad := range []string{"", "127.0.0.1:8000", "ftp://host", "http://user:pw@host", "https://host/?q=1", "http://", "https://:443"} {
		if _, err := checkEndpoint(bad, true); err == nil {
			t.Errorf("checkEndpoint(%q) accepted", bad)
		}
	}
	// Credentials in the clear over a network: only when asked for.
	for _, remote := range []string{"http://meridian.example", "http://10.0.0.7:8000", "http://127.0.0.1.example"} {
		if _, err := checkEndpoint(remote, false); err == nil || !strings.Contains(err.Error(), "in the clear") {
			t.Errorf("checkEndpoint(%q) = %v; want refused", remote, err)
		}
		if _, err := checkEndpoint(remote, true); err != nil {
			t.Errorf("checkEndpoint(%q, insecure) = %v", remote, err)
		}
	}
	if _, err := NewClient(ClientConfig{Endpoint: "https://meridian.example", ClientID: "a--b", ClientSecret: "s",
		TokenURL: "http://keycloak.example/realms/meridian/protocol/openid-connect/token"}); err == nil {
		t.Error("a token_url over http to another host was accepted")
	}
}

func TestCredentialsMustBeOneKind(t *testing.T) {
	base := ClientConfig{Endpoint: "http://127.0.0.1:1"}
	cases := map[string]ClientConfig{
		"none":          base,
		"both":          {Endpoint: base.Endpoint, Token: "t", ClientID: "a--b", ClientSecret: "s"},
		"half":          {Endpoint: base.Endpoint, ClientID: "a--b"},
		"bad token url": {Endpoint: base.Endpoint, ClientID: "a--b", ClientSecret: "s", TokenURL: "nope"},
	}
	for name, cfg := range cases {
		if _, err := NewClient(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// An API refusal naming fields becomes errors on those attributes; one naming none, or
// a field the resource does not have, a general error carrying the code and message.
func TestAPIErrorsPointAtAttributes(t *testing.T) {
	attrs := map[string]bool{"partitions": true, "document": true, "topic": true}
	var diags diag.Diagnostics
	addAPIError(&diags, "Could not", &APIError{Status: 400, Code: "invalid", Message: "the request is invalid",
		Details: map[string]any{"partitions": []any{"may only grow"}, "document": map[string]any{"streams.a.linger_ms": []any{"too big"}}}}, attrs)
	if len(diags) != 2 {
		t.Fatalf("diagnostics %v", diags)
	}
	for _, d := range diags {
		withPath, ok := d.(diag.DiagnosticWithPath)
		if !ok {
			t.Fatalf("%v has no attribute path", d)
		}
		switch {
		case withPath.Path().Equal(path.Root("partitions")):
			if !strings.Contains(d.Detail(), "may only grow") {
				t.Errorf("partitions: %q", d.Detail())
			}
		case withPath.Path().Equal(path.Root("document")):
			if !strings.Contains(d.Detail(), "streams.a.linger_ms: too big") {
				t.Errorf("document: %q", d.Detail())
			}
		default:
			t.Errorf("unexpected path %v", withPath.Path())
		}
	}

	diags = nil
	addAPIError(&diags, "Could not", &APIError{Status: 404, Code: "not_found", Message: "topic 'a.b' not found",
		Details: map[string]any{"field": "topic"}}, attrs)
	if d, ok := diags[0].(diag.DiagnosticWithPath); !ok || !d.Path().Equal(path.Root("topic")) {
		t.Errorf("a NotFound naming its field: %v", diags)
	}

	diags = nil
	addAPIError(&diags, "Could not", &APIError{Status: 409, Code: "quota_exceeded", Message: "max_topics reached",
		Details: map[string]any{"quota": "max_topics", "limit": 1.0}}, attrs)
	if len(diags) != 1 || !strings.Contains(diags[0].Detail(), "409 quota_exceeded: max_topics reached") ||
		!strings.Contains(diags[0].Detail(), `"limit":1`) {
		t.Errorf("a refusal naming no attribute: %v", diags)
	}

	diags = nil
	addAPIError(&diags, "Could not", errors.New("connection refused"), attrs)
	if len(diags) != 1 || diags[0].Detail() != "connection refused" {
		t.Errorf("a transport error: %v", diags)
	}
}

func TestDatabusDocumentsCompareCanonically(t *testing.T) {
	a, errA := canonical([]byte(`{"streams": {"b": {"x": 1}, "a": {"y": 2.5}}}`))
	b, errB := canonical([]byte(`{"streams":{"a":{"y":2.5},"b":{"x":1}}}`))
	if errA != nil || errB != nil || a != b {
		t.Fatalf("%q %v / %q %v", a, errA, b, errB)
	}
}

// Every resource, data source and attribute of the schema is in the generated docs
// (docs/, tfplugindocs' format): a schema change without regenerated docs fails here.
func TestDocsCoverEverySchemaAttribute(t *testing.T) {
	ctx := context.Background()
	p := New("test")()
	docs := filepath.Join("..", "..", "docs")
	var providerSchema provider.SchemaResponse
	p.Schema(ctx, provider.SchemaRequest{}, &providerSchema)
	requireDocumented(t, filepath.Join(docs, "index.md"), keys(providerSchema.Schema.Attributes))
	for _, factory := range p.Resources(ctx) {
		r := factory()
		var meta resource.MetadataResponse
		r.Metadata(ctx, resource.MetadataRequest{ProviderTypeName: "meridian"}, &meta)
		var s resource.SchemaResponse
		r.Schema(ctx, resource.SchemaRequest{}, &s)
		names := keys(s.Schema.Attributes)
		for _, attribute := range s.Schema.Attributes {
			names = append(names, nestedNames(attribute)...)
		}
		requireDocumented(t, filepath.Join(docs, "resources", strings.TrimPrefix(meta.TypeName, "meridian_")+".md"), names)
	}
	for _, factory := range p.DataSources(ctx) {
		d := factory()
		var meta datasource.MetadataResponse
		d.Metadata(ctx, datasource.MetadataRequest{ProviderTypeName: "meridian"}, &meta)
		var s datasource.SchemaResponse
		d.Schema(ctx, datasource.SchemaRequest{}, &s)
		names := keys(s.Schema.Attributes)
		for _, attribute := range s.Schema.Attributes {
			names = append(names, nestedNames(attribute)...)
		}
		requireDocumented(t, filepath.Join(docs, "data-sources", strings.TrimPrefix(meta.TypeName, "meridian_")+".md"), names)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// nestedNames are the attribute names of a nested attribute's objects, at any depth.
func nestedNames(attribute any) []string {
	var names []string
	switch a := attribute.(type) {
	case rschema.ListNestedAttribute:
		for name, inner := range a.NestedObject.Attributes {
			names = append(append(names, name), nestedNames(inner)...)
		}
	case dschema.ListNestedAttribute:
		for name, inner := range a.NestedObject.Attributes {
			names = append(append(names, name), nestedNames(inner)...)
		}
	}
	return names
}

func requireDocumented(t *testing.T, file string, names []string) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Errorf("no docs page: %v", err)
		return
	}
	text := string(raw)
	for _, name := range names {
		if !strings.Contains(text, "- `"+name+"` (") {
			t.Errorf("%s does not document `%s`", file, name)
		}
	}
}

// Reads are tried again after a 503 (a busy or restarting control plane); writes,
// which may have been applied, are not.
func TestReadsAreRetriedWritesAreNot(t *testing.T) {
	calls := map[string]int{}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls[r.Method]++
		if r.Header.Get("Authorization") != "Bearer t0k" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if calls[r.Method] < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error": {"code": "unavailable", "message": "busy", "details": {}}}`))
			return
		}
		_, _ = w.Write([]byte(`{"name": "east"}`))
	}))
	defer server.Close()
	client, err := NewClient(ClientConfig{Endpoint: server.URL, Token: "t0k"})
	if err != nil {
		t.Fatal(err)
	}
	var region struct {
		Name string `json:"name"`
	}
	if err := client.Get(context.Background(), "regions/east", nil, &region); err != nil || region.Name != "east" {
		t.Fatalf("GET after two 503s: %v %+v", err, region)
	}
	err = client.Post(context.Background(), "regions", map[string]any{"name": "x"}, nil)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || calls["POST"] != 1 {
		t.Fatalf("POST: %v after %d calls", err, calls["POST"])
	}
}
