package provider

// Acceptance tests: OpenTofu (or Terraform) driven by terraform-plugin-testing against a
// running control plane (TF_ACC=1). tests/terraform/ starts one (the demo: two regions
// of three brokers each, the Celery worker, the controllers, the local issuer) and runs
// these with:
//
//	MERIDIAN_API_URL     the control plane, http://127.0.0.1:PORT
//	MERIDIAN_ADMIN_TOKEN a platform administrator's token
//	MERIDIAN_TEST_REGION the home region of the tenants the tests make (its cluster
//	                     has an object store); MERIDIAN_TEST_OTHER_REGION a second one
//	TF_ACC_TERRAFORM_PATH the CLI; TF_ACC_PROVIDER_HOST registry.opentofu.org for tofu
//
// Each test makes tenants of its own (through the API, as a platform administrator),
// so tests run in parallel and leave the demo's objects alone.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
)

var testAccProviders = map[string]func() (tfprotov6.ProviderServer, error){
	"meridian": providerserver.NewProtocol6WithError(New("test")()),
}

// accEnv is the control plane the acceptance tests use; they fail (never skip) when
// TF_ACC is set without it.
type accEnv struct {
	endpoint, adminToken, region, otherRegion string
}

func testAccEnv(t *testing.T) accEnv {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance tests run with TF_ACC=1 against a control plane (tests/terraform starts one)")
	}
	env := accEnv{
		endpoint:    os.Getenv("MERIDIAN_API_URL"),
		adminToken:  os.Getenv("MERIDIAN_ADMIN_TOKEN"),
		region:      os.Getenv("MERIDIAN_TEST_REGION"),
		otherRegion: os.Getenv("MERIDIAN_TEST_OTHER_REGION"),
	}
	if env.endpoint == "" || env.adminToken == "" || env.region == "" || env.otherRegion == "" {
		t.Fatal("TF_ACC needs MERIDIAN_API_URL, MERIDIAN_ADMIN_TOKEN, MERIDIAN_TEST_REGION and MERIDIAN_TEST_OTHER_REGION")
	}
	return env
}

// admin is an API client acting as a platform administrator: for setting up tenants
// and for changes made behind Terraform's back.
func (e accEnv) admin(t *testing.T) *Client {
	t.Helper()
	client, err := NewClient(ClientConfig{Endpoint: e.endpoint, Token: e.adminToken, UserAgent: "acceptance-tests"})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// adminProvider is a provider block acting as a platform administrator.
func (e accEnv) adminProvider() string {
	return fmt.Sprintf("provider \"meridian\" {\n  endpoint = %q\n  token    = %q\n}\n", e.endpoint, e.adminToken)
}

// credentialsProvider is a provider block (alias tenant) with a service account's client
// credentials, exchanged at the local issuer's token endpoint.
func (e accEnv) credentialsProvider(clientID, secret string) string {
	return fmt.Sprintf("provider \"meridian\" {\n  alias         = \"tenant\"\n  endpoint      = %q\n"+
		"  client_id     = %q\n  client_secret = %q\n}\n", e.endpoint, clientID, secret)
}

func unique(prefix string) string {
	raw := make([]byte, 3)
	if _, err := rand.Read(raw); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(raw)
}

// testTenant makes a tenant (home: the test region; also allowed: the other one) and
// waits until its identity is provisioned; it is deleted when the test ends.
func (e accEnv) testTenant(t *testing.T) string {
	t.Helper()
	client := e.admin(t)
	ctx := context.Background()
	slug := unique("tf")
	body := map[string]any{"slug": slug, "name": "Terraform " + slug, "home_region": e.region,
		"regions": []string{e.otherRegion}}
	if err := client.Post(ctx, "tenants", body, nil); err != nil {
		t.Fatalf("creating tenant %s: %v", slug, err)
	}
	err := client.waitFor(ctx, "tenant "+slug, func() (bool, string, error) {
		var tenant tenantJSON
		err := client.Get(ctx, "tenants/"+slug, nil, &tenant)
		return err == nil && tenant.Status == "ready", tenant.Status, err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.deleteTenant(t, slug) })
	return slug
}

// deleteTenant removes what a failed test may have left in the tenant, then the tenant.
func (e accEnv) deleteTenant(t *testing.T, slug string) {
	client := e.admin(t)
	ctx := context.Background()
	scope := url.Values{"tenant": {slug}}
	accounts, _ := List[serviceAccountJSON](ctx, client, "service-accounts", scope)
	for _, account := range accounts {
		_ = client.Delete(ctx, fmt.Sprintf("service-accounts/%d", account.ID), nil)
	}
	topics, _ := List[topicJSON](ctx, client, "topics", scope)
	for _, topic := range topics {
		_ = client.Delete(ctx, "topics/"+escape(topic.FullName), nil)
		_ = waitGone(ctx, client, "topics/"+escape(topic.FullName), nil)
	}
	if err := client.Delete(ctx, "tenants/"+slug, nil); err != nil && !IsNotFound(err) {
		t.Logf("deleting tenant %s: %v", slug, err)
		return
	}
	if err := waitGone(ctx, client, "tenants/"+slug, nil); err != nil {
		t.Logf("tenant %s: %v", slug, err)
	}
}

// serviceAccount makes a service account of the tenant through the API: its client id
// and secret.
func (e accEnv) serviceAccount(t *testing.T, tenant, name, role string) (string, string) {
	t.Helper()
	var account serviceAccountJSON
	body := map[string]any{"tenant": tenant, "name": name, "role": role}
	if err := e.admin(t).Post(context.Background(), "service-accounts", body, &account); err != nil {
		t.Fatalf("creating service account %s in %s: %v", name, tenant, err)
	}
	return account.ClientID, account.ClientSecret
}

// apiGet reads path as the administrator into out; a test failure if it cannot.
func (e accEnv) apiGet(t *testing.T, path string, query url.Values, out any) error {
	return e.admin(t).Get(context.Background(), path, query, out)
}

// expectGone is a CheckDestroy: GET path answers 404.
func (e accEnv) expectGone(t *testing.T, path string, query url.Values) error {
	var body map[string]any
	err := e.admin(t).Get(context.Background(), path, query, &body)
	if IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%s still exists: %v", path, body)
}

// tokenFor exchanges client credentials for a token at the local issuer: proof a
// secret the provider stored works.
func (e accEnv) tokenFor(clientID, secret string) error {
	client, err := NewClient(ClientConfig{Endpoint: e.endpoint, ClientID: clientID, ClientSecret: secret, UserAgent: "acceptance-tests"})
	if err != nil {
		return err
	}
	var whoami struct {
		Name string `json:"name"`
	}
	if err := client.Get(context.Background(), "auth/whoami", nil, &whoami); err != nil {
		return err
	}
	if !strings.Contains(whoami.Name, clientID) && whoami.Name == "" {
		return fmt.Errorf("whoami answered no name for %s", clientID)
	}
	return nil
}
