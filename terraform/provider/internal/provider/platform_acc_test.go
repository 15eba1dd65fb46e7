package provider

import (
	"context"
	"fmt"
	"net/url"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

func platformHCL(env accEnv, slug, name string, maxTopics int, role string) string {
	return env.adminProvider() + fmt.Sprintf(`
resource "meridian_tenant" "t" {
  slug        = %[1]q
  name        = %[2]q
  home_region = %[3]q
  regions     = [%[4]q]
}

resource "meridian_quota" "t" {
  tenant         = meridian_tenant.t.slug
  max_topics     = %[5]d
  requests_per_s = 500
}

resource "meridian_member" "alice" {
  tenant   = meridian_tenant.t.slug
  username = "alice-%[1]s"
  email    = "alice@example.com"
  role     = %[6]q
}
`, slug, name, env.region, env.otherRegion, maxTopics, role)
}

func quotaHas(t *testing.T, env accEnv, slug string, maxTopics int64) resource.TestCheckFunc {
	return func(*terraform.State) error {
		var quota map[string]any
		if err := env.apiGet(t, "quotas/"+slug, nil, &quota); err != nil {
			return err
		}
		if quota["max_topics"] != float64(maxTopics) || quota["requests_per_s"] != float64(500) {
			return fmt.Errorf("API has quota %v; want max_topics %d, requests_per_s 500", quota, maxTopics)
		}
		return nil
	}
}

// TestAccTenantQuotaMember (platform administrator): a tenant with its quota and a
// member, each changed in place, drift of the quota from the API, imports, and destroy
// (the tenant deleted, which the API allows only once the member's role is gone... and
// the quota left as it was: a tenant always has one).
func TestAccTenantQuotaMember(t *testing.T) {
	env := testAccEnv(t)
	slug := unique("tfp")
	admin := env.admin(t)
	t.Cleanup(func() { env.deleteTenant(t, slug) })
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			return env.expectGone(t, "tenants/"+slug, nil)
		},
		Steps: []resource.TestStep{
			{
				Config: platformHCL(env, slug, "Platform test", 7, "developer"),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("meridian_tenant.t", "status", "ready"),
					resource.TestCheckResourceAttr("meridian_tenant.t", "home_region", env.region),
					resource.TestCheckResourceAttr("meridian_member.alice", "role", "developer"),
					resource.TestCheckResourceAttrSet("meridian_member.alice", "subject"),
					quotaHas(t, env, slug, 7),
				),
			},
			{
				Config: platformHCL(env, slug, "Platform test, renamed", 9, "viewer"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_tenant.t", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("meridian_quota.t", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("meridian_member.alice", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("meridian_tenant.t", "name", "Platform test, renamed"),
					quotaHas(t, env, slug, 9),
					func(*terraform.State) error {
						members, err := List[memberJSON](context.Background(), admin, "members", url.Values{"tenant": {slug}})
						if err != nil {
							return err
						}
						if len(members) != 1 || members[0].Role != "viewer" {
							return fmt.Errorf("API has members %+v; want alice, viewer", members)
						}
						return nil
					},
				),
			},
			{
				// Drift: the quota changed through the API is put back.
				PreConfig: func() {
					if err := admin.Patch(context.Background(), "quotas/"+slug, nil, map[string]any{"max_topics": 3}, nil); err != nil {
						t.Fatal(err)
					}
				},
				Config: platformHCL(env, slug, "Platform test, renamed", 9, "viewer"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_quota.t", plancheck.ResourceActionUpdate),
				}},
				Check: quotaHas(t, env, slug, 9),
			},
			{ResourceName: "meridian_tenant.t", ImportState: true, ImportStateId: slug, ImportStateVerify: true},
			{ResourceName: "meridian_quota.t", ImportState: true, ImportStateId: slug, ImportStateVerify: true},
			{ResourceName: "meridian_member.alice", ImportState: true, ImportStateId: slug + "/alice-" + slug, ImportStateVerify: true},
		},
	})
}
