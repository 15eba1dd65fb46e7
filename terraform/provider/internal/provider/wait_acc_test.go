package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

// slowTopics is a proxy in front of the control plane that, while hold is set, answers
// every read of a topic as still provisioning: a control plane that takes longer than
// the provider waits, made on demand (the real one finishes a topic in a moment).
// Everything else, the topic's creation included, is the real API's.
func slowTopics(t *testing.T, target string, hold *atomic.Bool) *httptest.Server {
	t.Helper()
	upstream, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	proxy.ModifyResponse = func(answer *http.Response) error {
		request := answer.Request
		if !hold.Load() || request.Method != http.MethodGet || answer.StatusCode != http.StatusOK ||
			!strings.HasPrefix(request.URL.Path, "/api/v1/topics/") {
			return nil
		}
		raw, err := io.ReadAll(answer.Body)
		if err != nil {
			return err
		}
		var topic map[string]any
		if err := json.Unmarshal(raw, &topic); err != nil {
			return err
		}
		topic["status"] = "provisioning"
		raw, err = json.Marshal(topic)
		if err != nil {
			return err
		}
		answer.Body = io.NopCloser(bytes.NewReader(raw))
		answer.ContentLength = int64(len(raw))
		answer.Header.Set("Content-Length", strconv.Itoa(len(raw)))
		return nil
	}
	server := httptest.NewServer(proxy)
	t.Cleanup(server.Close)
	return server
}

// TestAccCreateWaitRunningOutKeepsTheTopic: a create whose wait for the brokers runs out
// (or is interrupted) is a warning, not an error, so the topic is not tainted and never
// replaced (its records would go): it stays in the state as provisioning; the next plan
// updates it in place, and that update waits again; once ready, a refresh sees it so.
func TestAccCreateWaitRunningOutKeepsTheTopic(t *testing.T) {
	env := testAccEnv(t)
	tenant := env.testTenant(t)
	fullName := tenant + ".slow"
	var hold atomic.Bool
	hold.Store(true)
	proxy := slowTopics(t, env.endpoint, &hold)
	hcl := fmt.Sprintf(`
provider "meridian" {
  endpoint       = %q
  token          = %q
  wait_timeout_s = 2
}

resource "meridian_topic" "slow" {
  tenant     = %q
  name       = "slow"
  partitions = 1
}
`, proxy.URL, env.adminToken, tenant)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			return env.expectGone(t, "topics/"+escape(fullName), nil)
		},
		Steps: []resource.TestStep{
			{
				Config: hcl,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("meridian_topic.slow", "status", "provisioning"),
					resource.TestCheckResourceAttr("meridian_topic.slow", "full_name", fullName),
					func(*terraform.State) error { // it exists (the API, not through the proxy)
						var topic topicJSON
						return env.apiGet(t, "topics/"+escape(fullName), nil, &topic)
					},
				),
				ExpectNonEmptyPlan: true, // not ready: the next apply updates it
			},
			{
				// Still not ready: an update in place (not a replacement), whose wait runs out.
				Config: hcl,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_topic.slow", plancheck.ResourceActionUpdate),
				}},
				ExpectError: regexp.MustCompile(`not done within 2s`),
			},
			{
				PreConfig: func() { hold.Store(false) },
				Config:    hcl,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_topic.slow", plancheck.ResourceActionNoop),
				}},
				Check: resource.TestCheckResourceAttr("meridian_topic.slow", "status", "ready"),
			},
		},
	})
}
